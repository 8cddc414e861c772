"""Which file the environment's Python loads for each library name, run by that Python
(``probes.measure_loads`` runs this file as ``python -I -S loadcheck.py REQUESTS``): ctypes
only, no TensorFlow import. ``REQUESTS`` is a JSON list of ``[name, how]`` or ``[name, how,
folder]``: "ctypes" is ctypes' own default for that Python (what TF's self-check does),
"tensorflow" is TensorFlow's ``LoadLibraryExW(name, NULL, LOAD_WITH_ALTERED_SEARCH_PATH)``,
"extension" a dependency of TensorFlow's extension module (its folder first, the third item).
The file that loaded: ``GetModuleFileNameW`` on Windows, ``dl_iterate_phdr`` elsewhere. It
prints one line, ``MARKER`` then JSON ``{name: {"path", "how"[, "error"]}}``.

Written for Python 3.6 and later, as ``tfcheck.py`` is (see there), with the standard library
only. ctypes is imported where it is used: ``probes`` imports this module for ``MARKER``.
"""

import json
import os
import sys
from typing import Any, Dict, List, Optional

MARKER = "ENVFACTORY_LOADED "


def _windows(requests: List[List[str]], out: Dict[str, Any]) -> None:
    import ctypes

    k32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
    k32.LoadLibraryExW.restype = ctypes.c_void_p
    k32.LoadLibraryExW.argtypes = [ctypes.c_wchar_p, ctypes.c_void_p, ctypes.c_uint32]
    k32.GetModuleFileNameW.argtypes = [ctypes.c_void_p, ctypes.c_wchar_p, ctypes.c_uint32]

    def name_of(handle: Any) -> Optional[str]:
        buf = ctypes.create_unicode_buffer(32768)
        n = k32.GetModuleFileNameW(handle, buf, 32768)
        return buf.value[:n] if n else None

    for item in requests:
        name, how = item[0], item[1]
        try:
            if how == "tensorflow":
                handle = k32.LoadLibraryExW(name, None, 0x8)
                if not handle:
                    raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined,unused-ignore]
                how_text = "LoadLibraryExW(LOAD_WITH_ALTERED_SEARCH_PATH)"
                out[name] = {"path": name_of(handle), "how": how_text}
                continue
            own = os.path.join(item[2], name) if how == "extension" and len(item) > 2 else None
            if own and os.path.exists(own):
                handle = ctypes.WinDLL(own)._handle  # type: ignore[attr-defined,unused-ignore]
                how_text = "ctypes.WinDLL(full path in the extension's folder)"
            else:
                handle = ctypes.WinDLL(name)._handle  # type: ignore[attr-defined,unused-ignore]
                how_text = "ctypes.WinDLL(name), Python %d.%d" % sys.version_info[:2]
            out[name] = {"path": name_of(handle), "how": how_text}
        except OSError as exc:
            out[name] = {"path": None, "how": how, "error": str(exc)}


def _elsewhere(requests: List[List[str]], out: Dict[str, Any]) -> None:
    import ctypes

    class _Info(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]

    callback = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.POINTER(_Info), ctypes.c_size_t, ctypes.c_void_p
    )
    for item in requests:
        name = item[0]
        try:
            ctypes.CDLL(name)
        except OSError as exc:
            out[name] = {"path": None, "how": "ctypes.CDLL(name)", "error": str(exc)}
            continue
        found: List[str] = []

        def visit(
            info: Any, size: int, data: Any, name: str = name, found: List[str] = found
        ) -> int:
            raw = info.contents.name
            if raw:
                path = raw.decode(sys.getfilesystemencoding(), "surrogateescape")
                base = os.path.basename
                if base(path) == name or base(os.path.realpath(path)) == base(name):
                    found.append(path)
            return 0

        ctypes.CDLL(None).dl_iterate_phdr(callback(visit), None)
        how_text = "ctypes.CDLL(name), dl_iterate_phdr"
        out[name] = {"path": found[0] if found else None, "how": how_text}


def main() -> None:
    requests = json.loads(sys.argv[1])
    out: Dict[str, Any] = {}
    if os.name == "nt":
        _windows(requests, out)
    else:
        _elsewhere(requests, out)
    print(MARKER + json.dumps(out))


if __name__ == "__main__":
    main()
