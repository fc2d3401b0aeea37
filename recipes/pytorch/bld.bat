@echo on
rem Install the cell's repaired wheel into the package prefix: the conda package is made from the same wheel
rem as the pip artifact (one compile per cell). TORCHBUILD_WHEEL comes from build/script_env in meta.yaml.
if not defined TORCHBUILD_WHEEL (
    echo TORCHBUILD_WHEEL is not set: render the recipe with "python pipeline.py plan" first. 1>&2
    exit /b 1
)
"%PYTHON%" -m pip install --no-deps --no-index --no-build-isolation --no-compile "%TORCHBUILD_WHEEL%"
if errorlevel 1 exit /b 1
