# Plain make, no autotools. Everything builds into $(BUILD) (default build/).
#   make            build libploop, ploop, ploop-nbd, ploop-container
#   make check      install deps, build, run unit tests (plain + ASan/UBSan), integration tests
#   make soak       10-minute soak of server, snapshots, containers, a mount (SOAK_SECONDS=N)
#   make demo       install deps, build, show an image, a snapshot, an export, a container
#   make bench      benchmarks side by side with the peers (scripts/bench/)
#   make install PREFIX=/usr/local
# Each folder's *.c files are picked up by wildcard: add a file, it builds.

BUILD   ?= build
PREFIX  ?= /usr/local
CC      ?= cc
SAN     ?=
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wformat=2 -Wvla
ALLCFLAGS := -std=gnu11 $(WARN) -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -fPIC -pthread \
	-Ilibploop/include -Ilibploop/src -Ikmod-free-nbd/client -Itls $(SAN) $(CFLAGS) $(shell pkg-config --cflags libxml-2.0 fuse3 2>/dev/null)
LDFLAGS ?=
LIBS    := -laio -lxml2 -lpthread -luuid -lxxhash -lz -ldl

LIB_SRC  := $(sort $(wildcard libploop/src/*.c))
PLOOP_SRC := $(sort $(wildcard tools/ploop/*.c))
NBD_SRC  := $(sort $(wildcard kmod-free-nbd/server/*.c kmod-free-nbd/fuse/*.c))
CLIENT_SRC := $(sort $(wildcard kmod-free-nbd/client/*.c))
TLS_SRC  := $(sort $(wildcard tls/*.c))
CT_SRC   := $(sort $(wildcard tools/ploop-container/*.c))
UNIT_SRC := $(sort $(wildcard tests/unit/*.c))
CRASH_SRC := $(sort $(wildcard tests/crash/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIB_A  := $(BUILD)/lib/libploop.a
LIB_SO := $(BUILD)/lib/libploop.so
CLIENT_A := $(BUILD)/lib/libploop-client.a
TLS_A    := $(BUILD)/lib/libploop-tls.a
BINS   := $(BUILD)/bin/ploop $(if $(NBD_SRC),$(BUILD)/bin/ploop-nbd) $(if $(CT_SRC),$(BUILD)/bin/ploop-container)
UNIT   := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))

.SECONDARY:
.PHONY: all check check-powerfail unit unit-asan protocol-asan soak soak-asan integration demo bench install deps clean format \
	fuzz fuzz-build fuzz-bins fuzz-smoke
all: $(LIB_A) $(LIB_SO) $(BINS) $(BUILD)/lib/libploop.pc

# Quiet by default; `make V=1` shows the commands.
Q := $(if $(V),,@)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC      $<")
	$(Q)$(CC) $(ALLCFLAGS) -MMD -MP -c -o $@ $<

$(LIB_A): $(call obj,$(LIB_SRC))
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# Control-socket client and local attach (FUSE file + loop + mount), shared by
# ploop, ploop-nbd and ploop-container.
$(CLIENT_A): $(call obj,$(CLIENT_SRC))
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# GnuTLS sessions for every network end (tls/ploop-tls.h), shared by the
# three binaries; libploop itself knows no sockets.
$(TLS_A): $(call obj,$(TLS_SRC))
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(call obj,$(LIB_SRC))
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,libploop.so.0 $(SAN) -o $@ $^ $(LDFLAGS) $(LIBS)

$(BUILD)/lib/libploop.pc: libploop/libploop.pc.in
	@mkdir -p $(dir $@)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' $< > $@

# libext2fs only in ploop (offline compaction, kmod-free-nbd/client/fs-compact-offline.c):
# the other binaries never pull that object out of the client archive.
# No -lxml2 in the binaries: libploop/lazy/xml-lazy.c loads libxml2 when
# the descriptor's own reader gives up or a descriptor is written.
XML_LAZY := $(call obj,libploop/lazy/xml-lazy.c)
# No -lgnutls anywhere: tls/gnutls-lazy.c (in $(TLS_A)) loads GnuTLS on the
# first TLS call. The small C libraries are linked statically where the host
# has their archives: each shared object is ~0.3 ms of mapping and relocation
# at every start, and an attach starts a ploop-nbd per disk.
LD_STATIC  := -Wl,-Bstatic
LD_DYNAMIC := -Wl,-Bdynamic
static_libs = $(foreach l,$(1),$(if $(wildcard /usr/lib/$(shell $(CC) -dumpmachine)/lib$(l).a),-l$(l)))
CT_STATIC := $(call static_libs,aio uuid xxhash z blkid seccomp nettle)
NBD_STATIC := $(call static_libs,aio xxhash z blkid uuid uring)
NBD_LIBS  := $(filter-out -lxml2 $(NBD_STATIC),$(LIBS) -luring -lblkid) $(if $(NBD_STATIC),$(LD_STATIC) $(NBD_STATIC) $(LD_DYNAMIC)) -ldl

$(BUILD)/bin/ploop: $(call obj,$(PLOOP_SRC)) $(XML_LAZY) $(CLIENT_A) $(TLS_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(SAN) -pthread -o $@ $^ $(LDFLAGS) $(filter-out -lxml2,$(LIBS)) -lblkid -lm -lext2fs -lcom_err

$(BUILD)/bin/ploop-nbd: $(call obj,$(NBD_SRC)) $(XML_LAZY) $(CLIENT_A) $(TLS_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(SAN) -pthread -o $@ $^ $(LDFLAGS) $(NBD_LIBS)

CT_LIBS   := $(filter-out -lxml2 $(CT_STATIC),$(LIBS) -lblkid -lz -lseccomp -lnettle) $(if $(CT_STATIC),$(LD_STATIC) $(CT_STATIC) $(LD_DYNAMIC)) -ldl
$(BUILD)/bin/ploop-container: $(call obj,$(CT_SRC)) $(XML_LAZY) $(CLIENT_A) $(TLS_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(SAN) -pthread -o $@ $^ $(LDFLAGS) $(CT_LIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(SAN) -pthread -o $@ $^ $(LDFLAGS) $(LIBS) -lcriterion -lgnutls

# Crash-test driver for tests/integration/crash-*.sh (libploop, no criterion).
$(BUILD)/tests/crash-writer: $(call obj,$(CRASH_SRC)) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(SAN) -pthread -o $@ $^ $(LDFLAGS) $(LIBS)

deps:
	scripts/install-deps.sh

# Criterion 2.4.1's runner leaks 48 bytes when it runs workers in parallel
# (seen under LSan with test_stream), so the sanitized run uses one worker.
UNIT_JOBS ?= 2
unit: $(UNIT)
	@set -e; for t in $(UNIT); do echo "== $$t"; $$t --jobs $(UNIT_JOBS); done

ASAN_VARS := BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"

unit-asan:
	$(MAKE) $(ASAN_VARS) UNIT_JOBS=1 unit

# The NBD protocol tests (real clients, the hostile-client fuzzer) against a
# sanitized server: any overflow or UB a client can trigger fails the run.
protocol-asan:
	$(MAKE) $(ASAN_VARS) all
	PLOOP_BUILD=build-asan ASAN_OPTIONS=detect_leaks=0 tests/integration/run.sh nbd-

# Everything at once for SOAK_SECONDS (tests/soak/soak.sh): 8 verified NBD
# clients, online snapshots and merges, a container loop, a mounted disk's
# file writer; data checked against models, daemons' RSS and fds flat.
# Exit 77 (skipped: not root, no FUSE) counts as a pass.
SOAK_SECONDS ?= 600
soak: all
	SOAK_SECONDS=$(SOAK_SECONDS) tests/soak/soak.sh; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ]

# The same for a minute against the sanitized build: a use-after-free or a
# race's UB that only long mixed use reaches fails `make check`.
soak-asan:
	$(MAKE) $(ASAN_VARS) all
	PLOOP_BUILD=build-asan SOAK_SECONDS=60 tests/soak/soak.sh; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ]

integration: all $(BUILD)/tests/crash-writer
	tests/integration/run.sh

# Soak the simulated power-cut tests (each run draws new kill points and new
# lost sectors): `make check-powerfail ROUNDS=20`.
ROUNDS ?= 5
check-powerfail: all $(BUILD)/tests/crash-writer
	for i in $$(seq $(ROUNDS)); do tests/integration/run.sh crash-powerfail || exit 1; done

check: deps
	$(MAKE) all
	$(MAKE) unit
	$(MAKE) unit-asan
	$(MAKE) integration
	$(MAKE) protocol-asan
	$(MAKE) soak-asan
	$(MAKE) fuzz-smoke

demo: deps
	$(MAKE) all
	scripts/demo.sh

bench: deps
	$(MAKE) all
	scripts/bench/run.sh

# ---- fuzzing (tests/fuzz/README.md): libFuzzer harnesses built by clang ----
# `make fuzz FUZZ_SECONDS=N` runs each harness N seconds, growing its corpus
# in build-fuzz/corpus/NAME from the seeds in tests/fuzz/corpus/NAME;
# `make fuzz-smoke` replays seeds and crashers, then fuzzes each briefly.
FUZZ_CC ?= clang-14
FUZZ_BUILD := build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 15
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(sort $(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_VARS := BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT=-O1 \
	SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -Wno-format-nonliteral"
FUZZ_FLAGS = -rss_limit_mb=2048 -malloc_limit_mb=1536 -timeout=20 -print_final_stats=1
# tmpfs when there is one: the harnesses create files and fsync every run.
FUZZ_TMP := $(shell test -w /dev/shm && echo /dev/shm || echo /tmp)
FUZZ_ENV := TMPDIR=$(FUZZ_TMP) ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
# Extra objects per harness: the NBD server without its main(), and the
# tar extraction of ploop-container with what it calls.
FUZZ_NBD_OBJ = $(call obj,$(addprefix kmod-free-nbd/server/,async.c budget.c connection.c exports.c handshake.c transmission.c))
FUZZ_TAR_OBJ = $(call obj,$(addprefix tools/ploop-container/,fill-tar.c error.c util.c))

fuzz-build:
	$(MAKE) $(FUZZ_VARS) fuzz-bins

fuzz-bins: $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_NAMES))

$(BUILD)/fuzz/fuzz_nbd: $(FUZZ_NBD_OBJ) $(TLS_A)
$(BUILD)/fuzz/fuzz_nbd: FUZZ_LIBS = -lgnutls
$(BUILD)/fuzz/fuzz_tar: $(FUZZ_TAR_OBJ)
$(BUILD)/obj/tests/fuzz/fuzz_nbd.o: ALLCFLAGS += -Ikmod-free-nbd/server
$(BUILD)/obj/tests/fuzz/fuzz_tar.o: ALLCFLAGS += -Itools/ploop-container
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/fuzz-common.o $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(SAN) -fsanitize=fuzzer -pthread -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDFLAGS) $(LIBS) $(FUZZ_LIBS)

fuzz: fuzz-build
	@set -e; for n in $(FUZZ_NAMES); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$n $(FUZZ_BUILD)/artifacts/$$n tests/fuzz/crashers/$$n; \
	  echo "== fuzz_$$n: $(FUZZ_SECONDS) s"; \
	  $(FUZZ_ENV) $(FUZZ_BUILD)/fuzz/fuzz_$$n $(FUZZ_FLAGS) -max_total_time=$(FUZZ_SECONDS) \
	    -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$n/ $(FUZZ_BUILD)/corpus/$$n tests/fuzz/corpus/$$n; \
	done

# Every seed and every recorded crasher runs once (a crasher that comes
# back fails here), then each harness fuzzes briefly from the seeds with a
# fixed seed: the gate replays the same mutations on every run (a slower
# machine runs a prefix of them), so a red fuzz-smoke is reproducible with
# the same command. Exploration with new seeds is `make fuzz`.
FUZZ_SMOKE_SEED ?= 1
fuzz-smoke: fuzz-build
	@set -e; for n in $(FUZZ_NAMES); do \
	  echo "== fuzz_$$n: replay"; \
	  log=$(FUZZ_BUILD)/smoke-$$n.log; \
	  if ! $(FUZZ_ENV) $(FUZZ_BUILD)/fuzz/fuzz_$$n $(FUZZ_FLAGS) -runs=0 tests/fuzz/corpus/$$n \
	    $$(test -d tests/fuzz/crashers/$$n && echo tests/fuzz/crashers/$$n) >$$log 2>&1; then \
	    tail -n 40 $$log; exit 1; fi; tail -n 2 $$log; \
	done
	@set -e; for n in $(FUZZ_NAMES); do \
	  echo "== fuzz_$$n: $(FUZZ_SMOKE_SECONDS) s"; \
	  rm -rf $(FUZZ_BUILD)/smoke/$$n; mkdir -p $(FUZZ_BUILD)/smoke/$$n $(FUZZ_BUILD)/artifacts/$$n; \
	  $(FUZZ_ENV) $(FUZZ_BUILD)/fuzz/fuzz_$$n $(FUZZ_FLAGS) -seed=$(FUZZ_SMOKE_SEED) -max_total_time=$(FUZZ_SMOKE_SECONDS) \
	    -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$n/ $(FUZZ_BUILD)/smoke/$$n tests/fuzz/corpus/$$n \
	    >$(FUZZ_BUILD)/smoke-$$n.log 2>&1 || { tail -n 60 $(FUZZ_BUILD)/smoke-$$n.log; exit 1; }; \
	  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' $(FUZZ_BUILD)/smoke-$$n.log; \
	done

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/sbin
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/libploop.so.0
	ln -sf libploop.so.0 $(DESTDIR)$(PREFIX)/lib/libploop.so
	install -m 644 libploop/include/libploop.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/lib/libploop.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	install -m 755 scripts/mount.ploop scripts/umount.ploop $(DESTDIR)$(PREFIX)/sbin/

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
