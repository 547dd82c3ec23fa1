"""Content identity, manifests that say why, and a content gate for build directories.

- ``hash_file(path)``, ``hash_tree(path, ignore=())``: blake3 (hex) of contents, relative paths,
  kinds and exec bits; never mtimes or absolute paths.
- ``wheel_identity(site_packages, distribution)``: an installed distribution by its ``RECORD``
  rows (or its source tree when editable).
- ``Manifest``: named components (``add_file``, ``add_tree``, ``add_bytes``, ``add_value``,
  ``add_list``, ``add_env``, ``add_wheel``); ``new.diff(old)`` lists why in words.
- ``gate(build_dir, manifest)``: the contract of FlashInfer's PR #4490 for a ninja build
  directory. Take the manifest (a snapshot of the inputs) *before* building; the gate holds the
  directory's lock, wipes the directory when its committed manifest is missing, corrupt or
  different (``.reasons`` says why), and commits the snapshot atomically only when the block
  ends without an exception::

      m = Manifest()
      m.add_tree("source:csrc", "csrc")
      m.add_bytes("build.ninja", rendered_ninja)
      with gate("build/mod", m) as g:
          if not g.fresh:
              print("rebuilding:", "; ".join(g.reasons))
          subprocess.run(["ninja", "-C", "build/mod"], check=True)
"""

from __future__ import annotations

from ._native import MANIFEST_FILE, Gate, Manifest, gate, hash_file, hash_tree, wheel_identity

__all__ = ["MANIFEST_FILE", "Gate", "Manifest", "gate", "hash_file", "hash_tree", "wheel_identity"]
