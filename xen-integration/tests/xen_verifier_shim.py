"""Runs Xen's verify-stream-v2 unchanged except for one Python 3 fix.

Xen 4.17's xen/migration/libxl.py checks EMULATOR_XENSTORE_DATA by comparing bytes with str ('\\x00'), which
only works on Python 2: on Python 3 every non-empty record of that type fails. We hand that one check a bytes
object that behaves like a Python 2 str; every other check runs exactly as Xen ships it.

    python3 xen_verifier_shim.py PATH/TO/verify-stream-v2 ARGS...
"""
import runpy
import sys

import xen.migration.libxl as libxl


class _Py2Str(bytes):
    def __getitem__(self, key):
        item = bytes.__getitem__(self, key)
        return chr(item) if isinstance(key, int) else _Py2Str(item)

    def split(self, sep=None, maxsplit=-1):
        if isinstance(sep, str):
            sep = sep.encode("latin-1")
        return [part.decode("latin-1") for part in bytes.split(self, sep, maxsplit)]


_original = libxl.record_verifiers[libxl.REC_TYPE_emulator_xenstore_data]


def _xenstore_data(self, content):
    return _original(self, _Py2Str(content))


libxl.record_verifiers[libxl.REC_TYPE_emulator_xenstore_data] = _xenstore_data
sys.stderr.write("xen_verifier_shim: Python 3 fix applied to EMULATOR_XENSTORE_DATA checking only\n")
tool = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(tool, run_name="__main__")
