# Set-up and entry points. Both targets create the stack's venv if missing
# and install into it (idempotent: re-installs only when requirements
# change).
#
#   make demo     synthetic data -> train -> test -> infer (CPU, minutes)
#   make test     the whole pytest suite (TEST_WORKERS=2 processes)
#   make test-core  the tests that touch torch's and mmengine's API
#                 (CORE_TESTS: ops, models, checkpoints, training,
#                 distributed, compile); CI runs them on the second and third stacks
#   make mmseg-tests  mmseg's own unit tests with this package imported
#
# STACK picks the OpenMMLab stack, each in its own venv with its own pins:
#   STACK=default  mmsegmentation 1.2.2 / mmengine 0.10.7 / mmcv-lite 2.1
#                  (.venv, constraints.txt)
#   STACK=onedl    the maintained fork onedl-mmsegmentation 1.4 /
#                  onedl-mmengine 0.10 / onedl-mmcv 2.3 without compiled
#                  ops, numpy 2 (.venv-onedl, constraints-onedl.txt);
#                  e.g. make test STACK=onedl
#   STACK=legacy   mmseg 1.2.2's own recommended stack: torch 2.1.2 (the
#                  package index's build), numpy 1.26, mmcv-lite 2.1.0,
#                  mmsegmentation 1.2.2, mmengine 0.10.7 (.venv-legacy,
#                  constraints-legacy.txt)
#
# GPU users with their own CUDA torch in the venv: make test CONSTRAINTS=
PYTHON ?= python3.11
STACK ?= default
ifeq ($(STACK),default)
VENV ?= .venv
STACK_CONSTRAINTS := constraints.txt
TORCH_PIN := torch==2.13.0
INSTALL := install_default
else ifeq ($(STACK),onedl)
VENV ?= .venv-onedl
STACK_CONSTRAINTS := constraints-onedl.txt
TORCH_PIN := torch==2.13.0
INSTALL := install_onedl
else ifeq ($(STACK),legacy)
VENV ?= .venv-legacy
STACK_CONSTRAINTS := constraints-legacy.txt
TORCH_PIN := torch==2.1.2
INSTALL := install_default
else
$(error STACK=$(STACK): choose STACK=default, STACK=onedl or STACK=legacy)
endif
CONSTRAINTS ?= $(STACK_CONSTRAINTS)
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PIP_C := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)
STAMP := $(VENV)/.mmseg_whitebox-installed
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
EXTRAS := tests,deploy,corruptions

# what CI runs on the onedl and legacy stacks: every test file that calls
# into torch's or mmengine's API (operators, models, mixed precision,
# checkpoints, training and resume, distributed runs); the whole suite
# runs on the default stack
CORE_TESTS := tests/test_ops.py tests/test_layers.py tests/test_heads.py \
	tests/test_backbones.py tests/test_mixed_precision.py \
	tests/test_banded_loss.py tests/test_checkpoint.py \
	tests/test_unsafe_checkpoints.py tests/test_compat.py \
	tests/test_apis_training.py tests/test_large_images_and_resume.py \
	tests/test_distributed.py tests/test_distributed_resume.py \
	tests/test_ddp_models.py tests/test_released_encoders.py \
	tests/test_released_init.py tests/test_compile.py \
	tests/test_config_text.py tests/test_mita.py \
	tests/test_attention_overflow.py tests/test_ddp_freeze_and_syncbn.py \
	tests/test_attention_registry.py

.PHONY: install demo test test-core mmseg-tests clean-demo

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# default stack: the package with its requirements, then mmcv-lite
define install_default
	$(PIP) install $(PIP_C) -e ".[$(EXTRAS)]"
	@# mmcv-lite unless an mmcv (e.g. a compiled one) is already there
	$(PY) -c "import mmcv" 2>/dev/null || $(PIP) install $(PIP_C) "mmcv-lite>=2.0.0rc4,<2.2.0"
endef

# onedl stack: the fork first (same import names as mmsegmentation, mmengine
# and mmcv, so those distributions must never be installed beside it), then
# the package without its dependencies, then those dependencies and extras
# except the OpenMMLab ones (read from the installed package's metadata)
define install_onedl
	@# onedl-mmcv built without torch in pip's build environment: no compiled
	@# ops (pure Python, seconds; mmseg_whitebox.compat stands in for mmcv.ops)
	$(PIP) install $(PIP_C) onedl-mmengine onedl-mmcv onedl-mmsegmentation
	$(PIP) install $(PIP_C) --no-deps -e .
	@echo "note: pip's resolver will say that mmseg-whitebox requires mmsegmentation and mmengine, 'which is not installed': expected, the onedl-* packages provide them"
	$(PIP) install $(PIP_C) $$($(PY) -c "from importlib.metadata import requires; \
	  from packaging.requirements import Requirement; \
	  reqs = [Requirement(r) for r in requires('mmseg-whitebox')]; \
	  print(' '.join(r.name + str(r.specifier) for r in reqs \
	    if not r.name.startswith(('mmsegmentation', 'mmengine', 'mmcv')) \
	    and (r.marker is None or any(r.marker.evaluate({'extra': e}) \
	         for e in '$(EXTRAS)'.split(',')))))")
endef

$(STAMP): $(PY) requirements.txt $(STACK_CONSTRAINTS) pyproject.toml
	@# torch first and alone, so pip takes the CPU build (see constraints.txt);
	@# an existing torch (e.g. a CUDA build) is kept
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install $(PIP_C) $(TORCH_PIN)
	$($(INSTALL))
	$(PY) -c "import mmseg_whitebox, mmseg.models; print('mmseg_whitebox', mmseg_whitebox.__version__, 'compat:', mmseg_whitebox.compat.STATUS)"
	@echo "import order: import mmseg_whitebox before timm/torchvision/mmseg.apis"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) tools/misc/demo.py

# TEST_WORKERS pytest processes (pytest-xdist) share the tests, one torch
# thread each (tests/conftest.py); TEST_WORKERS=0 runs them in this process
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-core: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal $(CORE_TESTS) $(PYTEST_ARGS)

# mmseg's own unit tests (from the installed mmseg's source distribution)
# with this package imported: importing it must never break mmseg
mmseg-tests: $(STAMP)
	$(PY) tests/upstream/run_mmseg_tests.py -n $(TEST_WORKERS) $(PYTEST_ARGS)

clean-demo:
	rm -rf work_dirs/demo data/synthetic-context
