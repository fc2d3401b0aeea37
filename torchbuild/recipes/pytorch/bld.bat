@echo on
rem Install the cell's repaired wheel into the package prefix: the conda package is made from the same wheel
rem as the pip artifact (one compile per cell). TORCHBUILD_WHEEL comes from build/script_env in meta.yaml.
if not defined TORCHBUILD_WHEEL (
    echo TORCHBUILD_WHEEL is not set: render the recipe with "python pipeline.py plan" first. 1>&2
    exit /b 1
)
rem The path is relative to the pipeline's working directory; conda-build runs this script elsewhere.
if defined TORCHBUILD_ROOT set "TORCHBUILD_WHEEL=%TORCHBUILD_ROOT%\%TORCHBUILD_WHEEL%"
"%PYTHON%" -m pip install --no-deps --no-index --no-build-isolation --no-compile "%TORCHBUILD_WHEEL%"
if errorlevel 1 exit /b 1
rem Leave out the DLLs a run dependency provides (TORCHBUILD_LEAVE_OUT: ';'-separated paths in site-packages), and
rem their RECORD rows, as torchbuild's own assembly does.
if defined TORCHBUILD_LEAVE_OUT (
    "%PYTHON%" -c "import csv, glob, io, os; sp = os.environ['SP_DIR']; gone = [p for p in os.environ['TORCHBUILD_LEAVE_OUT'].split(';') if p]; [os.remove(os.path.join(sp, p)) for p in gone]; records = glob.glob(os.path.join(sp, 'torch-*.dist-info', 'RECORD')); rows = [r for r in csv.reader(open(records[0], newline='')) if r and r[0] not in gone]; csv.writer(open(records[0], 'w', newline='')).writerows(rows)"
    if errorlevel 1 exit /b 1
)
