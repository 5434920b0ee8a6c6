# Two commands do all the setup on a fresh machine that has Python 3.10+ and pip:
#   make train   install into .venv, then train the default Decoder on Alice (1,500 steps, CPU)
#   make test    install into .venv (with test tools), then lint (ruff, the rules in pyproject.toml) and run the test suite
#   make reproduce   install, then every experiment of both documents -> results/README.md
#   make test-slurm  the SLURM launcher against a real single-node SLURM it starts and stops (root, 5-11 min; docs/slurm.md)
#   make test-signals  the stop-signal matrix in full: 3 launchers x 3 targets x 3 phases, whole sweeps each in a process
#                      of its own (the tests marked `matrix`, which make test leaves out)
#   make test-slow   the tests marked `slow`, which make test leaves out: a second case of what a cheaper test shows
#   make test-fake-slurm  the SLURM launcher's sweeps on a stand-in cluster (tests/fake_slurm.py; no root, no daemons):
#                      the tests marked `slurm`, which make test leaves out
#   make gpu-check   on a GPU machine (a CUDA build of torch): the GPU's numbers in <= 10 min -> bench/RESULTS.md (docs/devices.md)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; a plain `pip install torch` may pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: install train test test-slow test-slurm test-signals test-fake-slurm gpu-check sweep bench reproduce clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev,launchers,trackers,hf,umup,search]"
	# microsoft/mup for the parity test only; without its dependencies (they would replace the CPU torch)
	$(PY) -m pip install -q --no-deps "mup==1.0.0"
	touch $@

install: $(VENV)/.installed

train: install
	$(PY) -m initnorm.train

sweep: install
	$(PY) -m initnorm.train -m norm=pre,post warmup=0,200 seed=1,2,3

bench: install
	$(PY) -m initnorm.bench

# Every experiment of the deck and the chapter at the documents' sizes -> results/README.md
reproduce: install
	$(PY) -m initnorm.reproduce

# The linter first: a lint error fails `make test` (and CI) before the suite's minutes are spent.
# TEST_WORKERS: pytest-xdist processes; worksteal hands out single tests and lets an idle worker take queued ones
# (a module fixture is made once per worker that needs it). 2 fits a 2-core machine.
# -m 'not matrix and not slurm and not slow' (pytest markers, pyproject.toml): the stop-signal matrix (tests/test_signals.py, and the
# other whole sweeps stopped by a signal from outside) runs in `make test-signals`, the SLURM launcher's sweeps on its stand-in (tests/test_launchers.py, tests/test_ensemble.py) in
# `make test-fake-slurm`, a second case of what a cheaper test here shows (marked slow) in `make test-slow`; everything
# else runs here, in at most 7 min on 2 cores.
TEST_WORKERS ?= 2
test: install
	$(PY) -m ruff check .
	$(PY) -m pytest -p no:warnings -n $(TEST_WORKERS) --dist worksteal -m "not matrix and not slurm and not slow"

# Not part of `make test` (CI): each test marked slow repeats, for another case, what a cheaper test in `make test` shows.
test-slow: install
	$(PY) -m pytest -p no:warnings -n $(TEST_WORKERS) --dist worksteal -m slow

# Not part of `make test` (CI): needs root, starts SLURM's daemons. Run it before changing the launcher.
test-slurm: install
	PY=$(PY) scripts/slurm/test.sh

# The SLURM launcher's sweeps on a stand-in for sbatch/squeue/sacct/scancel (tests/fake_slurm.py): submitted scripts,
# a cancelled job checkpointed and resumed, USR2's requeue, a horizon sweep's array tasks, vectorised groups as an array.
test-fake-slurm: install
	$(PY) -m pytest -p no:warnings -n $(TEST_WORKERS) -m slurm tests/test_launchers.py tests/test_ensemble.py

# The tests marked `matrix` (none of them runs in `make test`), each matrix in full (INITNORM_TEST_FULL_MATRIX=1): the
# stop-signal matrix, every launcher x target (the sweep's process, its group by SIGINT and by SIGTERM) x phase, 27 sweeps
# (tests/test_signals.py), and the other real signals sent to whole sweeps from outside (a killed sweep's workers, a
# stopped search worker, a stacked sweep's workers stopped and resumed, SIGINT during the preflight); `make test` keeps a
# representative of each kind (tests/test_signals.py's SIGTERM and SIGINT, the sequential engine's stop, SIGTERM during
# the preflight, a killed search worker, SIGKILL then resume).
test-signals: install
	INITNORM_TEST_FULL_MATRIX=1 $(PY) -m pytest -p no:warnings -n $(TEST_WORKERS) -m matrix

# The default job (fp32, bf16-mixed), the wide µP sweep vectorised against one job, DDP on 2 GPUs where present and the
# canonical sweep against plain loops, on one GPU in <= 10 min; one line and exit 2 where no CUDA device is visible.
gpu-check: install
	$(PY) -m initnorm.repro.gpu_check

# outputs/ holds the runs and the compiler cache of compile=true|auto (outputs/.torch_compile_cache, docs/performance.md);
# .pytest_cache/ the test suite's compiler cache
clean:
	rm -rf $(VENV) outputs .pytest_cache
