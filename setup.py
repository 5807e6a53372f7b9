"""Build hook: the wheel carries the repository's ``specs/*.yaml`` as ``zoo/_specs/``.

The specs stay where the README and the docs name them (``specs/``); setuptools cannot map
a directory outside a package into it, so ``build_py`` copies them into the build tree.
An editable install skips the copy: ``zoo.shipped`` then reads the checkout's ``specs/``.
A non-editable build first empties the build tree's copies of the packages: setuptools
reuses ``build/lib`` and never deletes from it, so a second ``pip install .`` from a
checkout would otherwise carry files the checkout no longer has (old shipped references,
renamed modules) into the wheel. Everything else is in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SPECS = Path(__file__).resolve().parent / "specs"


class BuildPyWithSpecs(build_py):
    """``build_py`` that also copies ``specs/*.yaml`` to ``zoo/_specs/`` in the build."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False):
            for top in sorted({p.split(".")[0] for p in self.packages or []}):
                shutil.rmtree(Path(self.build_lib) / top, ignore_errors=True)
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "zoo" / "_specs"
        self.mkpath(str(target))
        for spec in sorted(SPECS.glob("*.yaml")):
            self.copy_file(str(spec), str(target / spec.name))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        target = Path(self.build_lib) / "zoo" / "_specs"
        return outputs + [str(target / s.name) for s in sorted(SPECS.glob("*.yaml"))]


setup(cmdclass={"build_py": BuildPyWithSpecs})
