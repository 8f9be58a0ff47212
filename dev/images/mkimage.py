#!/usr/bin/env python3
"""mkimage.py: build a single-layer OCI image-layout tar from a directory, offline.

Owns: nothing persistent. Receives: a root filesystem directory and the image
config values on the command line. Emits: one OCI image-layout tar
(oci-layout, index.json, blobs/sha256/{layer,config,manifest}) that
`ctr images import` accepts, with one index entry per image name, each carrying
the `io.containerd.image.name` annotation (without it ctr imports nothing).

The output is deterministic (sorted entries, fixed mtimes, uid/gid 0), so the
same input gives the same image digest on every machine.

Usage:
  mkimage.py --rootfs DIR --out FILE --name NAME [--name NAME2 ...]
             [--entrypoint JSON-LIST] [--cmd JSON-LIST] [--env K=V ...]
             [--workdir DIR] [--label K=V ...]
"""

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile

EPOCH = 0  # mtime of every file in the layer and the outer tar
CREATED = "1970-01-01T00:00:00Z"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar"


def fail(msg):
    print(f"mkimage.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def normalize(info):
    info.uid = 0
    info.gid = 0
    info.uname = "root"
    info.gname = "root"
    info.mtime = EPOCH
    return info


def layer_tar(rootfs):
    """Tar every entry under rootfs (sorted, paths relative, no leading './')."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = []
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                entries.append(os.path.join(dirpath, name))
        entries.sort(key=lambda p: os.path.relpath(p, rootfs).split(os.sep))
        for path in entries:
            arcname = os.path.relpath(path, rootfs)
            info = normalize(tar.gettarinfo(path, arcname))
            if info.isdir():
                info.name = arcname + "/"
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            elif info.isdir() or info.issym():
                tar.addfile(info)
            else:
                fail(f"{path}: only directories, regular files and symlinks are supported")
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def key_values(items, what):
    out = {}
    for item in items:
        if "=" not in item:
            fail(f"{what} {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def json_list(text, what):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"{what} {text!r}: not JSON ({e})")
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        fail(f"{what} {text!r}: expected a JSON list of strings")
    return value


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rootfs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--name", action="append", required=True,
                   help="full image reference, e.g. docker.io/library/busybox:latest")
    p.add_argument("--entrypoint", default=None)
    p.add_argument("--cmd", default=None)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--workdir", default="/")
    p.add_argument("--label", action="append", default=[])
    a = p.parse_args()

    if not os.path.isdir(a.rootfs):
        fail(f"--rootfs {a.rootfs!r}: not a directory")
    for name in a.name:
        last = name.rsplit("/", 1)[-1]
        if "/" not in name or ":" not in last:
            fail(f"--name {name!r}: expected a full reference like registry/repo:tag")

    layer = layer_tar(a.rootfs)
    layer_digest = digest(layer)  # uncompressed, so blob digest == diff_id

    cfg = {"Env": a.env, "WorkingDir": a.workdir}
    if a.entrypoint is not None:
        cfg["Entrypoint"] = json_list(a.entrypoint, "--entrypoint")
    if a.cmd is not None:
        cfg["Cmd"] = json_list(a.cmd, "--cmd")
    labels = key_values(a.label, "--label")
    if labels:
        cfg["Labels"] = labels
    config = canonical({
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": CREATED, "created_by": "rkubelet dev/images/mkimage.py"}],
    })
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": MT_LAYER, "digest": layer_digest, "size": len(layer)}],
    })
    index = canonical({
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MT_MANIFEST,
                "digest": digest(manifest),
                "size": len(manifest),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                },
            }
            for name in a.name
        ],
    })

    files = [
        ("oci-layout", canonical({"imageLayoutVersion": "1.0.0"})),
        ("index.json", index),
    ]
    for blob in (layer, config, manifest):
        files.append(("blobs/sha256/" + digest(blob).split(":", 1)[1], blob))

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs/", "blobs/sha256/"):
            info = normalize(tarfile.TarInfo(d))
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name, data in files:
            info = normalize(tarfile.TarInfo(name))
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, a.out)
    print(digest(manifest))


if __name__ == "__main__":
    main()
