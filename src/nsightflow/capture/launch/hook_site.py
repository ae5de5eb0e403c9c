"""Where a command's hook is installed from: the ``sitecustomize`` nsightflow writes into a private folder of the run
and prepends to the program's ``PYTHONPATH`` (nsightflow.capture.inside.hook does the rest inside the program), and the
temporary folder its processes are given."""

from __future__ import annotations

import os
from pathlib import Path

SITECUSTOMIZE = '''"""Written by nsightflow: follow this program's NVTX ranges (nsightflow.capture.inside.hook)."""
import os as _os
import sys as _sys

def _is_python():  # not a tool's embedded interpreter (ncu runs its rules in one, and reads PYTHONPATH too)
    try:
        return "python" in _os.path.basename(_os.readlink("/proc/self/exe")).lower()
    except OSError:
        return True


if _os.environ.get("NSIGHTFLOW_HOOK") and _is_python():
    _here = _os.path.dirname(_os.path.abspath(__file__))
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
    _mine = _sys.modules.pop("sitecustomize", None)
    try:  # the sitecustomize this one hides, if the environment has one
        import sitecustomize  # noqa: F401
    except ImportError:
        pass
    finally:
        _sys.modules["sitecustomize"] = _mine
    try:
        from nsightflow.capture.inside.hook_install import install
    except ImportError:
        _sys.path.append({src!r})
        from nsightflow.capture.inside.hook_install import install
    install()
'''


def site_dir(parent: str | Path) -> Path:
    """The folder holding the ``sitecustomize`` that installs the hook (prepended to the command's ``PYTHONPATH``):
    ``<parent>/nsightflow-site``, private to this user (made with mode 0700; one found there is used only when it is
    a real folder owned by this user that no one else can write to), the file written anew each time.

    Every Python process of the command runs what that folder holds, so a folder another user could plant a file in
    (a predictable name in a shared temporary folder) would run their code as this user: ``parent`` is the run's own
    folder (its job's private temporary folder, or the run's results), never a shared one."""
    import nsightflow
    from nsightflow import files

    folder = Path(parent) / "nsightflow-site"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    check_private(folder)
    src = str(Path(nsightflow.__file__).resolve().parent.parent)
    files.write_text(folder / "sitecustomize.py", SITECUSTOMIZE.format(src=src))
    check_private(folder / "sitecustomize.py")
    return folder


def check_private(path: Path) -> None:
    """Refuse ``path`` unless it is this user's own, not a symbolic link, and writable by no one else."""
    import stat

    from nsightflow.errors import CaptureError

    st = os.lstat(path)
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = "it is a symbolic link"
    elif st.st_uid != os.getuid():
        why = f"it belongs to user id {st.st_uid}, not to this user ({os.getuid()})"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"others can write to it (mode {stat.S_IMODE(st.st_mode):o})"
    if why is not None:
        raise CaptureError(
            f"{path}: the command hook's folder is not private ({why}); every Python process of the command would "
            "run what it holds. Remove it (or make it yours with mode 0700), and check who could have written there"
        )


def program_tmp(private: str | Path) -> dict[str, str]:
    """The temporary folder the command's processes are given (``TMPDIR``): ``<private>/tmp``, in this run's own
    folder, so that what the program and its launchers leave there (torchrun's ``torchelastic_*`` logs at every
    launch, a killed program's files) is removed with the job's scratch or stays in the run's results, never in the
    machine's shared ``/tmp``. Inductor's cache stays where it is when the program runs plainly, so a compiled program
    finds the same cached kernels in every launch: ``torchinductor_<user>`` in this job's temporary folder, torch's
    rule (``torch._inductor.runtime.cache_dir_utils.default_cache_dir``) written out here because importing that
    module costs a second and sets ``TORCHINDUCTOR_CACHE_DIR`` in the importing process."""
    import getpass
    import re
    import tempfile

    folder = Path(private).resolve() / "tmp"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {"TMPDIR": str(folder)}
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = f"uid_{os.getuid()}"
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
            tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)
        )
    return env
