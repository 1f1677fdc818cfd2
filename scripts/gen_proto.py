"""Regenerate liverl/v1/*_pb2*.py from proto/liverl/v1/*.proto (the only way generated code changes).

    python scripts/gen_proto.py           # rewrite liverl/v1
    python scripts/gen_proto.py --check   # exit 1 when liverl/v1 is stale
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = Path("liverl") / "v1"


def generate(out_root: Path) -> list[Path]:
    """Compile every .proto into out_root/liverl/v1 and return the generated paths."""
    import grpc_tools
    from grpc_tools import protoc

    sources = sorted((PROTO_ROOT / PACKAGE).glob("*.proto"))
    (out_root / PACKAGE).mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *[str(s.relative_to(PROTO_ROOT)) for s in sources],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed: fix the .proto files above")
    return sorted(p for p in (out_root / PACKAGE).iterdir() if p.name != "__init__.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report whether liverl/v1 is stale")
    args = parser.parse_args()
    if not args.check:
        generate(ROOT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = [p.name for p in fresh if not (ROOT / PACKAGE / p.name).exists()
                 or not filecmp.cmp(p, ROOT / PACKAGE / p.name, shallow=False)]
    if stale:
        print(f"generated code is stale: {', '.join(stale)}; run: python scripts/gen_proto.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
