"""Smoke checks of torchvision beside torch, run where the Plan builds torchvision (``--expect-torchvision``): it
imports with the Plan's release from the environment and its C++ operators registered; ``nms`` and ``roi_align``
give known answers; a PNG round trip through torchvision.io is exact and a JPEG one close; a transforms pipeline (v1,
and v2 where the release has it) gives the values computed by hand; a resnet18 without weights runs forward. Each takes
seconds (under Wine too). Standard library only at module level (copied into the fresh environments with
smoke_checks.py).
"""

from __future__ import annotations

import importlib
import math
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

from .smoke_base import CheckFailed, Expect, Outcome, torch_module

# nms: box 1 overlaps box 0 with IoU 81/119 = 0.68, box 3 overlaps box 0 with IoU 95/105 = 0.90; box 2 overlaps none.
BOXES = ((0.0, 0.0, 10.0, 10.0), (1.0, 1.0, 11.0, 11.0), (20.0, 20.0, 30.0, 30.0), (0.5, 0.0, 10.5, 10.0))
SCORES = (0.9, 0.8, 0.7, 0.6)
KEPT = {0.5: [0, 2], 0.75: [0, 1, 2], 0.95: [0, 1, 2, 3]}  # IoU threshold -> the indices nms keeps
# roi_align of f(x, y) = 4y + x (a 4x4 map) over the box (0, 0)-(3, 3) into one bin: bilinear sampling of a linear
# map is exact and the 2x2 samples lie symmetric about the box's centre (1.5, 1.5), so the answer is f there.
ROI_ANSWER = 7.5
IMAGE_SHAPE = (3, 32, 48)
JPEG_QUALITY = 95
JPEG_MEAN_ERROR = 4.0  # grey levels: a smooth gradient at quality 95 comes back within about 1
IO_FUNCTIONS = ("encode_png", "decode_png", "encode_jpeg", "decode_jpeg")
CROP = 20  # transforms: the centre crop of a 3x40x40 gradient
MODEL_INPUT = (1, 3, 64, 64)


def _torchvision() -> Any:
    with warnings.catch_warnings():  # 0.15-0.16 warn that transforms.v2 is a beta, not what is checked
        warnings.simplefilter("ignore")
        return importlib.import_module("torchvision")


def _has_ops(torchvision: Any) -> bool | None:
    """Whether its C++ operators loaded; None where the release has no C++ extension (0.2.x, pure Python)."""
    try:
        extension = importlib.import_module("torchvision.extension")
    except ImportError:
        return None
    has_ops = getattr(extension, "_has_ops", None)
    return bool(has_ops()) if has_ops is not None else None


def check_torchvision_import(expect: Expect) -> Outcome:
    started = time.perf_counter()
    torchvision = _torchvision()
    took = time.perf_counter() - started
    problems = []
    version = str(torchvision.__version__)
    if expect.torchvision and version.split("+")[0] != expect.torchvision:
        problems.append(f"torchvision.__version__ is {version}, the Plan says {expect.torchvision}")
    where = os.path.realpath(torchvision.__file__)
    torch = torch_module()
    torch_dir = os.path.dirname(os.path.dirname(os.path.realpath(torch.__file__)))
    if expect.torch_file and os.path.dirname(os.path.dirname(where)) != torch_dir:
        problems.append(f"torchvision was imported from {where}, not from the environment's {torch_dir}")
    loaded = _has_ops(torchvision)
    if loaded is False:
        problems.append("its C++ operators did not load (torchvision.extension._has_ops() is False)")
    elif loaded and not hasattr(torch.ops.torchvision, "nms"):
        problems.append("torch.ops.torchvision has no nms operator")
    built_for = _built_for_cuda(torch) if loaded else ""
    if built_for.startswith("built for "):
        problems.append(f"torchvision was {built_for}")
    if problems:
        raise CheckFailed("; ".join(problems))
    said = "its C++ operators registered (torch.ops.torchvision.nms)" if loaded else "a release without C++ operators"
    said += f", {built_for}" if built_for else ""
    return Outcome("passed", f"torchvision {version} from {where} ({said}), imported in {took:.1f} s")


def _built_for_cuda(torch: Any) -> str:
    """The CUDA its operators were built for against a CUDA torch's: "for CUDA 13.0 as torch" where they agree,
    "built for ..." where they do not (a CPU torchvision beside a CUDA torch runs no op on the GPU; upstream's import
    refuses only a major mismatch), "" for a CPU torch or a release that cannot say."""
    if torch.version.cuda is None or not hasattr(torch.ops.torchvision, "_cuda_version"):
        return ""
    code = int(torch.ops.torchvision._cuda_version())
    if code == -1:
        return f"built for no CUDA (a CPU build) beside torch's CUDA {torch.version.cuda}"
    major, minor = code // 1000, code % 1000 // 10  # CUDA_VERSION: 13000 is 13.0, 9020 is 9.2
    if f"{major}.{minor}" != ".".join(torch.version.cuda.split(".")[:2]):
        return f"built for CUDA {major}.{minor}, torch for CUDA {torch.version.cuda}"
    return f"for CUDA {major}.{minor} as torch"


def check_nms(expect: Expect) -> Outcome:
    torchvision = _torchvision()
    ops = getattr(torchvision, "ops", None)
    if ops is None or not hasattr(ops, "nms"):
        return Outcome("skipped", f"skipped: torchvision {torchvision.__version__} has no torchvision.ops.nms")
    torch = torch_module()
    boxes = torch.tensor(BOXES, dtype=torch.float32)
    scores = torch.tensor(SCORES, dtype=torch.float32)
    problems = []
    for threshold, wanted in KEPT.items():
        kept = [int(i) for i in ops.nms(boxes, scores, threshold)]
        if kept != wanted:
            problems.append(f"nms at IoU {threshold} kept boxes {kept}, not {wanted}")
    said = "; ".join(f"IoU {t}: kept {w}" for t, w in KEPT.items())
    if hasattr(ops, "roi_align"):
        grid = torch.arange(16, dtype=torch.float32).reshape(1, 1, 4, 4)  # f(x, y) = 4y + x
        rois = torch.tensor([[0.0, 0.0, 0.0, 3.0, 3.0]])
        pooled = ops.roi_align(grid, rois, output_size=(1, 1), spatial_scale=1.0, sampling_ratio=2)
        value = float(pooled.flatten()[0]) if pooled.numel() == 1 else math.nan
        if tuple(pooled.shape) != (1, 1, 1, 1) or abs(value - ROI_ANSWER) > 1e-5:
            shape = tuple(pooled.shape)
            problems.append(f"roi_align gave shape {shape}, value {value}, not (1, 1, 1, 1), {ROI_ANSWER}")
        said += f"; roi_align over (0, 0)-(3, 3) of 4y + x: {value:g}"
    if problems:
        raise CheckFailed("; ".join(problems))
    return Outcome("passed", f"nms of {len(BOXES)} boxes: {said}")


def _gradient(torch: Any, shape: tuple[int, int, int]) -> Any:
    """A smooth uint8 image (channels, height, width): a different ramp in each channel."""
    channels, height, width = shape
    y = torch.arange(height, dtype=torch.float32).reshape(height, 1).expand(height, width)
    x = torch.arange(width, dtype=torch.float32).reshape(1, width).expand(height, width)
    ramps = [x * 5, y * 7, (x + y) * 3][:channels]
    return torch.stack(ramps).clamp(0, 255).to(torch.uint8)


def check_image_io(expect: Expect) -> Outcome:
    torchvision = _torchvision()
    io = importlib.import_module("torchvision.io")
    missing = [name for name in IO_FUNCTIONS if not hasattr(io, name)]
    if missing:
        return Outcome("skipped", f"skipped: torchvision {torchvision.__version__}'s io has no {', '.join(missing)}")
    torch = torch_module()
    image = _gradient(torch, IMAGE_SHAPE)
    problems = []
    png = io.encode_png(image)
    if bytes(png[:4].tolist()) != b"\x89PNG":
        problems.append(f"encode_png wrote {bytes(png[:4].tolist())!r}, not a PNG signature")
    back = io.decode_png(png)
    if tuple(back.shape) != IMAGE_SHAPE or not torch.equal(back, image):
        problems.append(f"the PNG decoded to shape {tuple(back.shape)}, not the {IMAGE_SHAPE} image encoded")
    jpeg = io.encode_jpeg(image, quality=JPEG_QUALITY)
    if bytes(jpeg[:2].tolist()) != b"\xff\xd8":
        problems.append(f"encode_jpeg wrote {bytes(jpeg[:2].tolist())!r}, not a JPEG start of image")
    decoded = io.decode_jpeg(jpeg)
    error = math.nan
    if tuple(decoded.shape) != IMAGE_SHAPE:
        problems.append(f"the JPEG decoded to shape {tuple(decoded.shape)}, not {IMAGE_SHAPE}")
    else:
        error = float((decoded.float() - image.float()).abs().mean())
        if not error <= JPEG_MEAN_ERROR:
            problems.append(f"the JPEG came back {error:.2f} grey levels off on average (tolerance {JPEG_MEAN_ERROR})")
    if problems:
        raise CheckFailed("; ".join(problems))
    return Outcome(
        "passed", f"{IMAGE_SHAPE} uint8: PNG {png.numel()} bytes, decoded exactly; JPEG (quality {JPEG_QUALITY}) "
        f"{jpeg.numel()} bytes, decoded {error:.2f} grey levels off on average"
    )  # fmt: skip


def _expected(torch: Any, image: Any) -> Any:
    """The centre crop of ``image``, flipped left-right, scaled to [0, 1] and normalised to [-1, 1], by hand."""
    top = (image.shape[-2] - CROP) // 2
    left = (image.shape[-1] - CROP) // 2
    crop = image[:, top : top + CROP, left : left + CROP].flip(-1)
    return (crop.to(torch.float32) / 255 - 0.5) / 0.5


def _compare(name: str, out: Any, wanted: Any) -> str | None:
    if tuple(out.shape) != tuple(wanted.shape):
        return f"{name} gave shape {tuple(out.shape)}, not {tuple(wanted.shape)}"
    diff = float((out - wanted).abs().max())
    return None if diff <= 1e-5 else f"{name} differs from the crop, flip and normalisation by hand by {diff:.2e}"


def _v2_pipeline(v2: Any, torch: Any, half: list[float]) -> Any:
    try:
        scale = v2.ToDtype(torch.float32, scale=True)
    except TypeError:  # 0.15: ToDtype does not scale, ConvertImageDtype does
        scale = v2.ConvertImageDtype(torch.float32)
    return v2.Compose([v2.CenterCrop(CROP), v2.RandomHorizontalFlip(p=1.0), scale, v2.Normalize(half, half)])


def check_transforms(expect: Expect) -> Outcome:
    torchvision = _torchvision()
    transforms = importlib.import_module("torchvision.transforms")
    torch = torch_module()
    image = _gradient(torch, (3, 40, 40))
    half = [0.5, 0.5, 0.5]
    v1 = transforms.Compose([
        transforms.CenterCrop(CROP), transforms.RandomHorizontalFlip(p=1.0),
        transforms.ConvertImageDtype(torch.float32), transforms.Normalize(half, half),
    ])  # fmt: skip
    wanted = _expected(torch, image)
    problems = [p for p in [_compare("v1 Compose", v1(image), wanted)] if p]
    resized = transforms.Resize((24, 36))(image)
    if tuple(resized.shape) != (3, 24, 36):
        problems.append(f"Resize((24, 36)) gave shape {tuple(resized.shape)}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            v2 = importlib.import_module("torchvision.transforms.v2")
    except ImportError:
        v2 = None
    if v2 is not None:
        problems += [p for p in [_compare("v2 Compose", _v2_pipeline(v2, torch, half)(image), wanted)] if p]
    if problems:
        raise CheckFailed("; ".join(problems))
    which = "v1 and v2" if v2 is not None else f"v1 (torchvision {torchvision.__version__} has no transforms.v2)"
    return Outcome(
        "passed", f"{which}: CenterCrop({CROP}), flip, to float, Normalize of a 3x40x40 gradient as computed by "
        f"hand, shape {tuple(wanted.shape)}; Resize((24, 36)) shape {tuple(resized.shape)}"
    )  # fmt: skip


def check_model(expect: Expect) -> Outcome:
    torchvision = _torchvision()
    torch = torch_module()
    torch.manual_seed(0)
    started = time.perf_counter()
    model = torchvision.models.resnet18()  # no weights in any release (pretrained=False / weights=None by default)
    model.eval()
    batch = torch.rand(*MODEL_INPUT)
    with torch.no_grad():
        out = model(batch)
        again = model(batch)
    took = time.perf_counter() - started
    problems = []
    if tuple(out.shape) != (1, 1000):
        problems.append(f"resnet18 gave shape {tuple(out.shape)} for a {MODEL_INPUT} input, not (1, 1000)")
    if not bool(torch.isfinite(out).all()):
        problems.append("its output is not finite")
    if not torch.equal(out, again):
        problems.append("two forward passes in eval mode differ")
    if problems:
        raise CheckFailed("; ".join(problems))
    return Outcome(
        "passed", f"resnet18 without weights, eval mode, {MODEL_INPUT} input: output (1, 1000), finite, the same "
        f"twice, in {took:.1f} s"
    )  # fmt: skip


CHECKS: dict[str, Callable[[Expect], Outcome]] = {
    "torchvision import": check_torchvision_import,
    "torchvision nms": check_nms,
    "torchvision image io": check_image_io,
    "torchvision transforms": check_transforms,
    "torchvision model": check_model,
}
