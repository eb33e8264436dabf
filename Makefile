# Set-up and entry points. Both targets create .venv if missing and install
# into it (idempotent: re-installs only when requirements change).
#
#   make demo     synthetic data -> train -> test -> infer (CPU, minutes)
#   make test     the whole pytest suite
#
# GPU users with their own CUDA torch in the venv: make test CONSTRAINTS=
PYTHON ?= python3.11
VENV ?= .venv
CONSTRAINTS ?= constraints.txt
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PIP_C := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)
STAMP := $(VENV)/.mmseg_whitebox-installed
PYTEST_ARGS ?=

.PHONY: install demo test clean-demo

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) requirements.txt constraints.txt pyproject.toml mmseg_whitebox/startup.py
	@# torch first and alone, so pip takes the CPU build (see constraints.txt);
	@# an existing torch (e.g. a CUDA build) is kept
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install $(PIP_C) torch==2.13.0
	$(PIP) install $(PIP_C) -e ".[tests,deploy,corruptions]"
	@# mmcv-lite unless an mmcv (e.g. a compiled one) is already there
	$(PY) -c "import mmcv" 2>/dev/null || $(PIP) install $(PIP_C) "mmcv-lite>=2.0.0rc4,<2.2.0"
	@# startup hook (mmseg_whitebox_startup.pth in site-packages): the compat
	@# fixes on first import of torchvision/mmcv.ops/mmengine, so import
	@# order never matters; remove with -m mmseg_whitebox.startup --uninstall
	$(PY) -m mmseg_whitebox.startup --install
	$(PY) -c "import mmseg_whitebox, mmseg.models; print('mmseg_whitebox', mmseg_whitebox.__version__, 'compat:', mmseg_whitebox.compat.STATUS)"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) tools/misc/demo.py

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

clean-demo:
	rm -rf work_dirs/demo data/synthetic-context
