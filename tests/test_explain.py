"""explain: measured on real logs from public threads (tests/data/explain-corpus/, see
tests/explain_corpus.py); the users' guide errors; linear time and streaming; bad input."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from explain_corpus import CORPUS, load_corpus, score

from envfactory.diagnose.explain import (
    WINDOW,
    _load,
    explain,
    explain_lines,
    patterns,
    read_lines,
    table,
)
from envfactory.errors import CatalogError, UserInputError

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
LOGS = load_corpus()
TUNING = [log for log in LOGS if not log.held_out]


def test_corpus_is_real_and_big_enough() -> None:
    ids = {p.id for p in patterns()}
    assert len(LOGS) >= 80
    assert sum(1 for log in LOGS if not log.expect) >= 15
    sources = [log.source for log in LOGS]
    assert all(
        re.match(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$", s) for s in sources
    )
    for log in LOGS:
        assert log.cause and log.text.strip(), log.name
        assert log.expect <= ids, (log.name, log.expect - ids)
    per_id = {pid: sum(1 for log in LOGS if pid in log.expect) for pid in ids}
    assert min(per_id.values()) >= 4, per_id
    # Held-back logs (`# split: held-out`) are measured by benchmarks/bench_explain.py, never
    # asserted here (a test that fails on them would be tuning on them). The first held-back
    # fifth was measured once in stop 15 and is spent: its 32 logs are tuning logs now, and the
    # next held-back set is collected and kept outside this corpus until it is measured.
    spent = [log for log in LOGS if log.spent]
    assert len(spent) == 32 and not any(log.held_out for log in spent)
    # The second held-back set, measured once on 2026-12-01 and tuned on since.
    assert sum(1 for log in LOGS if log.spent_2) == 38


def test_every_tuning_log_yields_its_expected_problems_and_nothing_else() -> None:
    result = score(TUNING)
    # A cudart dlerror with nothing else (no GPU, no CUDA set up in the log) is what TensorFlow
    # prints on every healthy CPU-only machine: explain must call it a note, which names the
    # cause for the case that the machine has a GPU. Four threads confirmed that cause for such a
    # log (two of them in the second held-back set); they can only be notes, and those are the
    # only misses allowed.
    assert result.missed == result.noted
    assert {pid for _, pid in result.noted} <= {"cudart-not-found"}
    assert len(result.noted) <= 4
    assert result.false_positive_logs == ()
    assert result.extra == ()


@pytest.mark.parametrize(
    ("line", "pid", "in_cause"),
    [
        # The nine errors of the Windows guide for TF 1.14 + CUDA 10.0 (issue 13, item 2).
        ("Could not load dynamic library 'cudnn64_7.dll'; dlerror: cudnn64_7.dll not found",
         "cudnn-not-found", "cudnn64_7.dll"),
        ("Failed to get convolution algorithm. This is probably because cuDNN failed to "
         "initialize", "conv-algorithm-failed", "memory"),
        ("failed initializing StreamExecutor for CUDA device ordinal 0: Internal: failed call "
         "to cuDevicePrimaryCtxRetain: CUDA_ERROR_INVALID_DEVICE: invalid device ordinal",
         "gpu-init-failed", "RTX 4090 under CUDA 10.0"),
        ("Internal: invalid device function", "gpu-arch-unsupported", "newer than its CUDA"),
        ("ImportError: DLL load failed: The specified module could not be found.",
         "dll-load-failed", "Visual C++"),
        ("InternalError: Blas GEMM launch failed : a.shape=(100, 784), b.shape=(784, 200)",
         "blas-gemm-failed", "memory"),
        ("ModuleNotFoundError: No module named 'numpy.core._multiarray_umath'",
         "numpy-abi-mismatch", "Python 3.8 under TF 1.14"),
        ("ValueError: numpy.ndarray size changed, may indicate binary incompatibility. "
         "Expected 88 from C header, got 80 from PyObject", "numpy-abi-mismatch", "scikit-image"),
        ("PackageNotFoundError: Packages missing in current channels:",
         "conda-package-not-found", "build string"),
    ],
)  # fmt: skip
def test_users_guide_errors(line: str, pid: str, in_cause: str) -> None:
    result = explain(line)
    assert [p.id for p in result.problems] == [pid]
    assert result.problems[0].severity == "problem"
    assert in_cause in result.problems[0].cause


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        # Messages of each class in forms the corpus does not hold (other libraries, versions,
        # platforms), each as the tool that prints it words it: TensorFlow's dso_loader,
        # self_check.py and cudart_stub, cuDNN 8's own loader, the CUDA runtime's
        # cudaGetErrorString, NVML, numpy's import checks.
        ("Found device 0 with properties:\nCould not load dynamic library 'cusparse64_11.dll'; "
         "dlerror: cusparse64_11.dll not found", [("cuda-library-not-found", "problem")]),
        ("Could not load library libcudnn_cnn_infer.so.8. Error: libnvrtc.so: cannot open "
         "shared object file: No such file or directory", [("cuda-library-not-found", "problem")]),
        ("ImportError: libcublas.so.9.0: cannot open shared object file: No such file or "
         "directory", [("cuda-library-not-found", "problem")]),
        ("ImportError: Could not find 'cudnn64_8.dll'. TensorFlow requires that this DLL be "
         "installed in a directory that is named in your %PATH% environment variable.",
         [("cudnn-not-found", "problem")]),
        ("Could not locate zlibwapi.dll. Please make sure it is in your library path!",
         [("cudnn-not-found", "problem")]),
        ("ImportError: Could not find the DLL(s) 'msvcp140_1.dll'. TensorFlow requires that "
         "these DLLs be installed in a directory that is named in your %PATH% environment "
         "variable.", [("dll-load-failed", "problem")]),
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device",
         [("gpu-arch-unsupported", "problem")]),
        ("UserWarning: NVIDIA GeForce RTX 3090 with CUDA capability sm_86 is not compatible with "
         "the current PyTorch installation.", [("gpu-arch-unsupported", "problem")]),
        ("Failed to initialize NVML: Driver/library version mismatch",
         [("driver-too-old", "problem")]),
        ("RuntimeError: module compiled against ABI version 0x1000009 but this version of numpy "
         "is 0x2000000\nImportError: numpy.core.multiarray failed to import",
         [("numpy-too-new", "problem")]),
        ("ValueError: numpy.dtype size changed, may indicate binary incompatibility. Expected 96 "
         "from C header, got 88 from PyObject", [("numpy-abi-mismatch", "problem")]),
        ("tf.test.is_gpu_available()  # False", [("tf-no-gpu", "problem")]),
        ("UnimplementedError: DNN library is not found. [Op:Conv2D]",
         [("cudnn-not-found", "problem")]),
        ("E cuda_diagnostics.cc:313] kernel version 470.57.2 does not match DSO version "
         "470.63.1 -- cannot find working devices in this configuration",
         [("driver-too-old", "problem")]),
        ("W bfc_allocator.cc:457] Allocator (GPU_0_bfc) ran out of memory trying to allocate "
         "3.00GiB (rounded to 3221225472)requested by op Conv2D", [("gpu-oom", "problem")]),
        ("AttributeError: module 'numpy' has no attribute 'object'.",
         [("numpy-too-new", "problem")]),
        ("ResolvePackageNotFound:\n  - cudatoolkit==10.0.130=0",
         [("conda-package-not-found", "problem")]),
        ("UnsatisfiableError: The following specifications were found\nto be incompatible with "
         "the existing python installation in your environment:\n\nSpecifications:\n\n  - "
         "tensorflow-gpu=1.14 -> python[version='>=3.6,<3.7.0a0|>=3.7,<3.8.0a0']",
         [("python-unsupported", "problem")]),
        ("tf.test.is_gpu_available() returns False", [("tf-no-gpu", "problem")]),
        # Any quote or apostrophe a forum or editor made of the ASCII one.
        ("Could not load dynamic library \u201clibcudnn.so.8\u201d; dlerror: libcudnn.so.8: cannot "
         "open shared object file", [("cudnn-not-found", "problem")]),
        ("NVIDIA-SMI has failed because it couldn\u2019t communicate with the NVIDIA driver.",
         [("no-gpu-driver", "problem")]),
        # PyTorch's and XLA's driver checks and the container toolkit's, besides CUDA's wording.
        ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found "
         "version 11040).", [("driver-too-old", "problem")]),
        ("W external/xla/xla/service/gpu/nvptx_compiler.cc:718] The NVIDIA driver's CUDA version "
         "is 12.0 which is older than the ptxas CUDA version (12.3.107).",
         [("driver-too-old", "problem")]),
        ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.2, please "
         "update your driver to a newer version", [("driver-too-old", "problem")]),
        # Out of memory while the context is created: the GPU is taken, not the model too big;
        # out of memory when TensorFlow allocates its pool stays gpu-oom.
        ("E cuda_driver.cc:1032] failed to create context: cuCtxCreate: CUDA_ERROR_OUT_OF_MEMORY: "
         "out of memory", [("gpu-init-failed", "problem")]),
        ("E cuda_driver.cc:806] failed to allocate 10.91G (11715084288 bytes) from device: "
         "CUDA_ERROR_OUT_OF_MEMORY: out of memory", [("gpu-oom", "problem")]),
        # cuSOLVER's dlerror (TensorFlow opens it only for a GPU it found), wrapped as pasted.
        ("Could not load dynamic library 'libcusolver.so.11';\ndlerror: libcusolver.so.11: "
         "cannot open shared object file", [("cuda-library-not-found", "problem")]),
        # What TensorFlow prints on a healthy machine without a GPU (TF 2.13+, TensorRT, the
        # profiler's CUPTI), PyTorch Lightning's "no GPU asked for" and the allocator's note that
        # a retried allocation is not a failure: never a problem.
        ("I cudart_stub.cc:28] Could not find cuda drivers on your machine, GPU will not be used.",
         [("no-gpu-driver", "note")]),
        ("W dso_loader.cc:64] Could not load dynamic library 'libnvinfer.so.7'; dlerror: "
         "libnvinfer.so.7: cannot open shared object file\nW py_utils.cc:38] TF-TRT Warning: "
         "Cannot dlopen some TensorRT libraries.", []),
        ("W dso_loader.cc:64] Could not load dynamic library 'libcupti.so.11.2'; dlerror: "
         "libcupti.so.11.2: cannot open shared object file", []),
        # NumPy 2's import message pasted from its second paragraph on
        ("downgrade to 'numpy<2' or try to upgrade the affected module.\nWe expect that some "
         "modules will need time to support NumPy 2.", [("numpy-too-new", "problem")]),
        ("GPU available: False, used: False", []),
        ("Using GPU: 0", []),
        # "No GPU" in users' words and in what the usual check scripts print.
        ("GPU is NOT AVAILABLE", [("tf-no-gpu", "problem")]),
        ("No GPU devices found", [("tf-no-gpu", "problem")]),
        ("Tensorflow is not using my GPU", [("tf-no-gpu", "problem")]),
        ("the model trains on the CPU instead of the GPU", [("tf-no-gpu", "problem")]),
        ("GPU devices: []", [("tf-no-gpu", "problem")]),
        ("Built with CUDA: False", [("tf-no-gpu", "problem")]),
        ("Please install GPU version of TF", [("tf-no-gpu", "problem")]),
        # The MSVC runtime as Windows' loader names it, and Python's DLL search errors.
        ("The code execution cannot proceed because MSVCP140.dll was not found. Reinstalling "
         "the program may fix this problem.", [("dll-load-failed", "problem")]),
        ("OSError: [WinError 126] The specified module could not be found. Error loading "
         "\"C:\\envs\\tf\\lib\\site-packages\\torch\\lib\\c10.dll\" or one of its dependencies.",
         [("dll-load-failed", "problem")]),
        ("OSError: [WinError 193] %1 is not a valid Win32 application",
         [("dll-load-failed", "problem")]),
        ("W bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out of memory trying to allocate "
         "2.20GiB with freed_by_count=0. The caller indicates that this is not a failure, but "
         "may mean that there could be performance gains if more memory were available.", []),
    ],
)  # fmt: skip
def test_each_class_not_only_the_corpus_wording(log: str, expected: list[tuple[str, str]]) -> None:
    assert [(p.id, p.severity) for p in explain(log).problems] == expected


def test_versions_are_read_from_the_line() -> None:
    log = next(x for x in LOGS if x.name == "cudnn-version-mismatch--kohya-ss-2787.txt")
    assert "Loaded 8.7.0, TensorFlow was built with 8.9.4." in explain(log.text).problems[0].cause


def test_cpu_only_messages_are_notes_unless_the_log_shows_a_gpu() -> None:
    cpu_only = (
        "W dso_loader.cc:59] Could not load dynamic library 'libcudart.so.10.1'; dlerror: "
        "libcudart.so.10.1: cannot open shared object file: No such file or directory\n"
        "I cudart_stub.cc:29] Ignore above cudart dlerror if you do not have a GPU set up on "
        "your machine."
    )
    result = explain(cpu_only)
    assert [(p.id, p.severity) for p in result.problems] == [("cudart-not-found", "note")]
    assert not result.has_problems
    with_gpu = cpu_only + "\nI gpu_device.cc:1555] Found device 0 with properties:"
    assert [(p.id, p.severity) for p in explain(with_gpu).problems] == [
        ("cudart-not-found", "problem")
    ]
    # Without TensorFlow's own note (a user who pasted the warnings only) nothing shows a GPU
    # either: still a note. A log showing that CUDA was set up (another CUDA library opened, a
    # CUDA toolkit directory in the LD_LIBRARY_PATH the dlerror prints) makes it a problem, and
    # so does TF 1.x's ImportError (the library is linked; TensorFlow cannot start at all).
    first_line = cpu_only.splitlines()[0]
    assert [(p.id, p.severity) for p in explain(first_line).problems] == [
        ("cudart-not-found", "note")
    ]
    opened = "I dso_loader.cc:48] Successfully opened dynamic library libcudnn.so.7\n"
    assert explain(opened + first_line).problems[0].severity == "problem"
    cuda_path = first_line + "; LD_LIBRARY_PATH: /usr/local/nvidia/lib64:/usr/local/cuda/lib64"
    assert explain(cuda_path).problems[0].severity == "problem"
    no_cuda_path = first_line + "; LD_LIBRARY_PATH: /usr/local/nvidia/lib:/opt/conda/lib"
    assert explain(no_cuda_path).problems[0].severity == "note"
    linked = "ImportError: libcudart.so.10.0: cannot open shared object file: No such file"
    assert explain(linked).problems[0].severity == "problem"


def test_a_cudart_dlerror_is_a_problem_when_the_user_says_the_gpu_was_set_up() -> None:
    # TensorFlow's own note says to ignore the dlerror "if you do not have a GPU set up": a log
    # naming the CUDA/cuDNN the user installed, GPU support or their card is the other case.
    dlerror = (
        "Could not load dynamic library 'cudart64_110.dll'; dlerror: cudart64_110.dll not found"
    )
    assert [(p.id, p.severity) for p in explain(dlerror).problems] == [("cudart-not-found", "note")]
    for intent in ("Windows 10, TF2.10.1, CUDA 11.2, cuDNN 8.1", "I need GPU support",
                   "pip install tensorflow-gpu==2.3.0", "my card is an RTX 3070"):  # fmt: skip
        found = explain(dlerror + "\n" + intent).problems
        assert [(p.id, p.severity) for p in found] == [("cudart-not-found", "problem")], intent


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        # TF >= 2.11 on native Windows with no GPU seen: the specific cause, not the generic one.
        ("C:\\Users\\me> python -c \"import tensorflow as tf; print(tf.__version__)\"\n2.12.0\n"
         "TensorFlow version: 2.12.0\nNum GPUs Available: 0", ["windows-no-gpu-build"]),
        # the issue template's heading, its answer on the next line
        ("### TensorFlow version\n\n2.13.0\n\n### OS platform and distribution\n\nWindows 11\n"
         "\nprint(tf.config.list_physical_devices('GPU'))  # []", ["windows-no-gpu-build"]),
        ("Successfully installed tensorflow-2.14.0 tensorflow-intel-2.14.0\n"
         "D:\\work\\train.py: GPU is NOT AVAILABLE", ["windows-no-gpu-build"]),
        # the same on Linux, on Windows with TF 2.10, or on Windows with the GPU found
        ("/home/me$ python check.py\nTensorFlow version: 2.12.0\nNum GPUs Available: 0",
         ["tf-no-gpu"]),
        ("C:\\Users\\me> python check.py\nTensorFlow version: 2.10.1\nNum GPUs Available: 0",
         ["tf-no-gpu"]),
        ("C:\\Users\\me> python check.py\nTensorFlow version: 2.12.0\n"
         "[PhysicalDevice(name='/physical_device:GPU:0', device_type='GPU')]", []),
        # a heading's answer is read with it only on the next non-empty line
        ("### TensorFlow version\n\nsee below\n2.13.0\nWindows 11\nNum GPUs Available: 0",
         ["tf-no-gpu"]),
    ],
)  # fmt: skip
def test_tf_2_11_or_later_on_native_windows(log: str, expected: list[str]) -> None:
    assert [p.id for p in explain(log).problems if p.severity == "problem"] == expected


def test_loader_checks_required_names() -> None:
    rule = (
        "problems:\n  - {id: x, keywords: [a], patterns: [a], requires: [%s], cause: c, fix: f}\n"
    )
    with pytest.raises(CatalogError, match="requires unknown"):
        _load(rule % "nowhere", "t.yaml")
    assert _load(rule % "x", "t.yaml").problems[0].requires == ("x",)


def test_loader_refuses_unbounded_wildcards() -> None:
    text = "problems:\n  - {id: x, keywords: [a], patterns: ['a.*b'], cause: c, fix: f}\n"
    with pytest.raises(CatalogError, match="unbounded"):
        _load(text, "t.yaml")
    ok = "problems:\n  - {id: x, keywords: [a], patterns: ['a.{0,9}b'], cause: c, fix: f}\n"
    assert _load(ok, "t.yaml").problems[0].id == "x"


def test_loader_checks_evidence_names() -> None:
    rule = (
        "problems:\n  - {id: x, keywords: [a], patterns: [a], weak_unless: [%s], cause: c, "
        "fix: f}\n"
    )
    with pytest.raises(CatalogError, match="unknown evidence"):
        _load(rule % "cuda-setup", "t.yaml")
    evidence = "evidence:\n  cuda-setup: {keywords: [ok], patterns: [ok]}\n"
    assert _load(evidence + rule % "cuda-setup", "t.yaml").problems[0].weak_unless == (
        "cuda-setup",
    )
    with pytest.raises(CatalogError, match="exactly"):
        _load("evidence:\n  gpu: {keywords: [a]}\n" + rule % "gpu", "t.yaml")


def test_shipped_patterns_have_no_unbounded_wildcards() -> None:
    for rule in table().problems:
        for regex in rule.regexes + rule.weak_regexes + rule.unless_log_has:
            assert not re.search(r"(?<!\\)\.[*+]", regex.pattern), (rule.id, regex.pattern)
    for ev in table().evidence:
        for regex in ev.patterns:
            assert not re.search(r"(?<!\\)\.[*+]", regex.pattern), (ev.name, regex.pattern)


def test_a_huge_line_is_scanned_in_windows() -> None:
    filler = "Loaded runtime CuDNN library: 8 " * (512 * 1024 // 32)
    assert explain(filler).problems == ()
    tail = "Loaded runtime CuDNN library: 8.7.0 but source was compiled with: 8.9.4."
    result = explain(filler + tail)
    assert [p.id for p in result.problems] == ["cudnn-version-mismatch"]
    assert all(len(line) <= WINDOW for line in result.problems[0].lines)


@pytest.mark.slow
@pytest.mark.parametrize(
    "unit",
    [
        "Could not find module '" + "a" * 40 + " ",
        "LD_LIBRARY_PATH: /usr/local/cudaXXXXXXXXXXXX",
        "no version of the of for ",
        "is_gpu_available(xxxxxxxxxx) returns returns ",
        "Could not load library libcudnn_x.so.8. Error: " + "/a" * 20,
        "Allocator (GPU_0_bfc) ran out of memory trying to allocate ",
        "tensorflow-gpu=1.14,>=<< -> python",
    ],
)
def test_hostile_lines_stay_linear(unit: str) -> None:
    # Each repeats the start of a pattern with a bounded lazy or nested repeat. Eight times the
    # text takes about eight times the CPU (6-9x measured); a pattern gone quadratic takes 64x.
    # CPU time of this process, best of three, not a wall-clock limit: a loaded machine slows
    # both sizes alike.
    def cpu(size: int) -> float:
        line = unit * (size // len(unit))
        best = float("inf")
        for _ in range(3):
            begin = time.process_time()
            explain(line)
            best = min(best, time.process_time() - begin)
        return best

    small, large = cpu(64 * 1024), cpu(512 * 1024)
    assert large < 24 * max(small, 0.01), (small, large)


def test_read_lines_streams_and_decodes() -> None:
    data = "a\r\nb\n" + "x" * (10 * WINDOW) + "\nlast"
    lines = list(read_lines(io.BytesIO(data.encode("utf-8")), "utf-8", "t"))
    assert lines[:2] == ["a", "b"] and lines[-1] == "last"
    assert max(len(line) for line in lines) <= 4 * WINDOW + (1 << 16)
    utf16 = "\ufeffOOM when allocating tensor\n".encode("utf-16-le")
    result = explain_lines(read_lines(io.BytesIO(utf16), "utf-8", "t"))
    assert [p.id for p in result.problems] == ["gpu-oom"]
    gbk = "ImportError: DLL load failed: 找不到指定的模块。\n".encode("gbk")
    result = explain_lines(read_lines(io.BytesIO(gbk), "gbk", "t"))
    assert [p.id for p in result.problems] == ["dll-load-failed"]
    with pytest.raises(UserInputError, match="byte 0xff at offset 3") as caught:
        list(read_lines(io.BytesIO(b"abc\xff\n"), "utf-8", "t"))
    assert caught.value.hint and "--encoding" in caught.value.hint


def _run(args: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [ENVFACTORY, *args], input=data, capture_output=True, timeout=120, check=False
    )


def test_cli_explain_stdin_json_and_exit_codes() -> None:
    oom = (CORPUS / "gpu-oom--santi-pdp-segan-42.txt").read_bytes()
    done = _run(["explain", "-", "--json"], oom)
    assert done.returncode == 3, done.stderr
    data = json.loads(done.stdout)
    assert [p["id"] for p in data["problems"]] == ["gpu-oom"]
    assert set(data["problems"][0]) == {"id", "severity", "lines", "cause", "fix"}
    healthy = _run(["explain", str(CORPUS / "healthy--tensorflow-62170.txt"), "--json"], b"")
    assert healthy.returncode == 0 and json.loads(healthy.stdout) == {"problems": []}
    notes_only = _run(["explain", str(CORPUS / "healthy--tensorflow-45359.txt")], b"")
    assert notes_only.returncode == 0 and b", note]" in notes_only.stdout


def test_cli_explain_non_utf8_stdin_is_an_error_with_a_hint() -> None:
    done = _run(["explain", "-"], b"Blas GEMM launch failed \xe9\xff\n")
    assert done.returncode == 1
    assert b"error: standard input is not valid utf-8" in done.stderr
    assert b"hint:" in done.stderr and b"Traceback" not in done.stderr
    ok = _run(["explain", "-", "--encoding", "latin-1"], b"Blas GEMM launch failed \xe9\xff\n")
    assert ok.returncode == 3 and b"blas-gemm-failed" in ok.stdout
