import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("iclr25_repo_packages", ROOT / "shared" / "packages.py")
repo_packages = importlib.util.module_from_spec(_spec)
sys.modules["iclr25_repo_packages"] = repo_packages
_spec.loader.exec_module(repo_packages)

_spec = importlib.util.spec_from_file_location("iclr25_uvkit", ROOT / "shared" / "uvkit.py")
uvkit = importlib.util.module_from_spec(_spec)
sys.modules["iclr25_uvkit"] = uvkit
_spec.loader.exec_module(uvkit)
