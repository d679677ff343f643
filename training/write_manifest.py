#!/usr/bin/python3
"""Writes models/MANIFEST.json: the SHA-256 of every file of the shipped model
folders (tests/model/demo_models_test.cc checks it). Run after retraining."""
import hashlib
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(REPO, "models")
FOLDERS = ["dikkat-lm", "dikkat-numbers"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    files, sizes = {}, {}
    for folder in FOLDERS:
        for name in sorted(os.listdir(os.path.join(MODELS, folder))):
            path = os.path.join(MODELS, folder, name)
            files[f"{folder}/{name}"] = sha256(path)
            sizes[f"{folder}/{name}"] = os.path.getsize(path)
    manifest = {"about": "SHA-256 of each shipped model file; written by training/write_manifest.py",
                "files": files, "bytes": sizes, "total_bytes": sum(sizes.values())}
    with open(os.path.join(MODELS, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"{len(files)} files, {sum(sizes.values()) / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
