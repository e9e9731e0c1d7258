"""`pdserve crd`: write the CRD YAML (and optionally its markdown reference) from the models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pdserve.api import vllm_versions
from pdserve.api.crd import CRD_FILENAME, crd_yaml
from pdserve.api.reference import reference_markdown


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdserve crd", description="Generate the DisaggregatedService CRD from the pydantic models.")
    p.add_argument("--out", action="append", type=Path, default=[], metavar="DIR", help=f"directory to write {CRD_FILENAME} into (repeatable); without it the YAML goes to stdout")
    p.add_argument("--reference", type=Path, metavar="PATH", help="also write the markdown CRD reference to PATH")
    p.add_argument("--versions-doc", type=Path, metavar="PATH", help="also rewrite the supported-vLLM-version table between its markers in PATH (docs/install.md)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any target file is out of date")
    p.add_argument("--apply", action="store_true",
                   help="create or upgrade the CRD on the cluster (server-side apply; refuses to strand stored versions)")
    p.add_argument("--kubeconfig", metavar="PATH", help="with --apply: kubeconfig (default $KUBECONFIG, ~/.kube/config, "
                   "then in-cluster)")
    return p


def _apply(kubeconfig: str | None) -> int:
    from pdserve.api.crd import build_crd
    from pdserve.api.crd_apply import CrdUpgradeRefused, apply_crd
    from pdserve.kube.client import load_api_client

    api = load_api_client(kubeconfig)
    try:
        result = apply_crd(api, build_crd())
    except CrdUpgradeRefused as e:
        print(f"pdserve crd --apply: refused: {e}", file=sys.stderr)
        return 1
    finally:
        api.close()
    print(f"{result.name}: {result.action}; served {', '.join(result.served_versions)}, storage "
          f"{result.storage_version}, storedVersions {', '.join(result.stored_versions)}")
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.apply:
        return _apply(args.kubeconfig)
    targets = [(d / CRD_FILENAME, crd_yaml()) for d in args.out]
    if args.reference:
        targets.append((args.reference, reference_markdown()))
    if args.versions_doc:
        targets.append((args.versions_doc, vllm_versions.with_table(args.versions_doc.read_text())))
    if not targets:
        sys.stdout.write(crd_yaml())
        return 0
    stale = []
    for path, text in targets:
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if args.check and stale:
        print("out of date (run `make crds`): " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0
