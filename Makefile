# dikkat: the two commands a newcomer needs.
#   make run   installs what is missing, builds, serves the shipped models
#   make test  installs what is missing, builds, runs every test
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ADDR ?= 127.0.0.1:50051
METRICS_ADDR ?= 127.0.0.1:9090
# The OpenAI-compatible HTTP API (docs/api.md); empty turns it off.
OPENAI_ADDR ?= 127.0.0.1:8000
CTEST_ARGS ?=

.PHONY: all deps configure build test run bench clean format docker-test hardening soak

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# Serves the two trained models shipped in models/ (docs/models.md); the first,
# the language model, is the default for requests that name no model.
# Only the server and the CLI are built (the tests take most of a full build).
run: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target dikkat-server dikkat
	$(BUILD_DIR)/server/dikkat-server --listen=$(ADDR) --metrics_listen=$(METRICS_ADDR) \
	  --openai_listen=$(OPENAI_ADDR) --model=models/dikkat-lm --model=models/dikkat-numbers

# Builds docker/Dockerfile with podman and smoke-tests the image from the host
# (docker/test.sh): health SERVING, Generate with the CLI, /metrics, SIGTERM ->
# exit 0. Not part of `make test`: a cold image build compiles the project.
docker-test: configure
	cmake --build $(BUILD_DIR) --target dikkat
	bash docker/test.sh $(BUILD_DIR)

# Sanitizer builds (ASan+UBSan with the fuzzers, TSan) and a short fuzz run;
# CI runs it after `make test` (scripts/hardening.sh, docs/hardening.md).
hardening: deps
	bash scripts/hardening.sh all

# The chaos soak's long form (docs/soak.md, ~6 min): 10 rounds of 6 s quiet +
# 24 s chaos windows, 20 s of overload, kill -9 + restart, a drain under
# load; the well-behaved probe's chaos p99 must stay within 2x its quiet
# p99. CI runs the short form (ctest -L soak).
soak: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target dikkat-server dikkat-soak tiny_models
	SOAK_QUIET=60s SOAK_ROUNDS=10 SOAK_OVERLOAD=20s bash tests/soak/soak_test.sh \
	  $(BUILD_DIR)/server/dikkat-server $(BUILD_DIR)/tests/dikkat-soak \
	  $(BUILD_DIR)/models/tiny-lm 240s --max_p99_ratio=2 --max_rss_growth_mib=128

bench: build
	BUILD_DIR=$(BUILD_DIR) bash bench/run.sh

clean:
	rm -rf $(BUILD_DIR)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')
