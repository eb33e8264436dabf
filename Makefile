# Set-up and entry points. Both targets create the stack's venv if missing
# and install into it (idempotent: re-installs only when requirements
# change).
#
#   make demo     synthetic data -> train -> test -> infer (CPU, minutes)
#   make test     the whole pytest suite (TEST_WORKERS=2 processes)
#   make test-core  the tests that touch torch's and mmengine's API
#                 (CORE_TESTS: ops, models, checkpoints, training,
#                 distributed, compile, the patches of other libraries and
#                 the capability table); CI runs them on the second and
#                 third stacks
#   make mmseg-tests  mmseg's own unit tests with this package imported
#   make gpu-check  the tests marked gpu (tests/gpu/: the GPU smoke check;
#                 attention overflow, SyncBN) on this machine's CUDA GPUs,
#                 the smoke check's table in GPU_CHECK_OUT; exit 2 if torch
#                 sees no CUDA GPU
#   make gpu-report  the benchmarks at GPU sizes in float32 and bfloat16
#                 on DEVICE (default cuda), one report in GPU_REPORT_OUT
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
	tests/test_attention_registry.py tests/test_patches.py \
	tests/test_capabilities.py

.PHONY: install demo test test-core mmseg-tests gpu-check gpu-report clean-demo

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

# the GPU targets refuse a machine where torch sees no CUDA GPU, in one
# line (argv[1]: the target)
define NO_GPU
import os, sys, torch
if not torch.cuda.is_available():
    print(f'{sys.argv[1]}: no CUDA GPU is visible (torch {torch.__version__}, '
          f'CUDA build {torch.version.cuda}, CUDA_VISIBLE_DEVICES='
          f'{os.environ.get("CUDA_VISIBLE_DEVICES", "unset")}): run it on a '
          'machine with one (make test runs the CPU dry run)', file=sys.stderr)
    sys.exit(2)
endef
export NO_GPU

# the GPU tests, the smoke check's table (gpu_smoke.md, gpu_smoke.json,
# ddp.log) written to GPU_CHECK_OUT; docs/benchmarks.md, "GPU check"
GPU_CHECK_OUT ?= work_dirs/gpu_check
GPU_TESTS := tests/gpu tests/test_attention_overflow.py \
	tests/test_ddp_freeze_and_syncbn.py

gpu-check: $(STAMP)
	@$(PY) -c "$$NO_GPU" gpu-check
	$(PY) -m pytest -m gpu $(GPU_TESTS) --gpu-out $(GPU_CHECK_OUT) $(PYTEST_ARGS)

# the decoder, encoder, training-step and shared-encoder benchmarks at GPU
# sizes, each in float32 and under bfloat16 autocast, then gpu_report.md
# of their tables; docs/benchmarks.md, "GPU report". BENCH runs each tool.
GPU_REPORT_OUT ?= work_dirs/gpu_report
DEVICE ?= cuda
BENCH ?= $(PY)
GPU_REPORT_PARTS := decoders decoders-compiled encoders train_step \
	shared_sweep
# $(call gpu_report_runs,PRECISION,AUTOCAST FLAGS)
define gpu_report_runs
	$(BENCH) tools/analysis_tools/benchmark_decoders.py --device $(DEVICE) --arch s --shapes 512 1024 2048 4096 --repeats 10 --warmup 2 --max-seconds 1 --no-flops $(2) --out $(GPU_REPORT_OUT)/decoders-$(1)
	$(BENCH) tools/analysis_tools/benchmark_decoders.py --device $(DEVICE) --arch s --models segmenter cbsa --compile --shapes 512 1024 2048 4096 --repeats 10 --warmup 2 --max-seconds 1 --no-flops $(2) --out $(GPU_REPORT_OUT)/decoders-compiled-$(1)
	$(BENCH) tools/analysis_tools/benchmark_encoders.py --device $(DEVICE) --arch s --shapes 512 1024 2048 --flops-shapes --repeats 5 --warmup 1 --max-seconds 1 $(2) --out $(GPU_REPORT_OUT)/encoders-$(1)
	$(BENCH) tools/analysis_tools/benchmark_train_step.py --device $(DEVICE) --arch s --models vit+segmenter vit+cbsa cbt+cbsa --shapes 512 1024 2048 --batch 1 --banded-loss 64 --repeats 3 --warmup 1 --max-seconds 2 $(2) --out $(GPU_REPORT_OUT)/train_step-$(1)
	$(BENCH) tools/analysis_tools/benchmark_shared_encoder.py --device $(DEVICE) --num-images 4 --shape 512 683 --settings 20 $(2) --out $(GPU_REPORT_OUT)/shared_sweep-$(1)
endef
# gpu_report.md: the device, torch and date, then per benchmark and
# precision its table (benchmark.md), the decode heads' slopes under theirs
define GPU_REPORT
import json, os.path as osp, sys
out, parts, lines = sys.argv[1], sys.argv[2:], []
for part in parts:
    for precision in ('float32', 'bfloat16'):
        folder = osp.join(out, f'{part}-{precision}')
        with open(osp.join(folder, 'benchmark.json')) as f:
            report = json.load(f)
        if not lines:
            m = report['machine']
            device = m.get('gpu') or m['cpu']
            lines += [f'# GPU report: {device}', '',
                      f'{device}, torch {m["torch"]}, {m["date"]}.', '']
        with open(osp.join(folder, 'benchmark.md')) as f:
            lines += [f'## {part}, {precision}', '', f.read()]
        fits = [f'{head} {fit["fwd_ms"]:.2f}' for head, fit
                in report.get('slopes', {}).items() if 'fwd_ms' in fit]
        if part.startswith('decoders') and fits:
            lines += ['Slope of fwd_ms against tokens (log-log; 1 = '
                      'linear): ' + ', '.join(fits) + '.', '']
with open(osp.join(out, 'gpu_report.md'), 'w') as f:
    f.write('\n'.join(lines))
print(f'written to {osp.join(out, "gpu_report.md")}')
endef
export GPU_REPORT

gpu-report: $(STAMP)
	$(if $(filter cuda%,$(DEVICE)),@$(PY) -c "$$NO_GPU" gpu-report)
	$(call gpu_report_runs,float32,)
	$(call gpu_report_runs,bfloat16,--amp --amp-dtype bfloat16)
	@$(PY) -c "$$GPU_REPORT" $(GPU_REPORT_OUT) $(GPU_REPORT_PARTS)

clean-demo:
	rm -rf work_dirs/demo data/synthetic-context
