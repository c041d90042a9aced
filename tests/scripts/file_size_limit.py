"""`python file_size_limit.py BYTES SCRIPT ARGS...`: runs SCRIPT as `__main__` in a process whose
files cannot grow past BYTES (RLIMIT_FSIZE, SIGXFSZ ignored): a write past it fails with EFBIG,
"File too large", as on a full disk, through the real libraries (orbax, tensorstore).
Used by tests/test_first_hour.py."""
import resource
import runpy
import signal
import sys

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
