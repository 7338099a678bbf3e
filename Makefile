# Plain make, no autotools. Everything builds into $(BUILD) (default build/).
#   make            build libploop, ploop, ploop-nbd, ploop-container
#   make check      install deps, build, run unit tests (plain + ASan/UBSan), integration tests
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
LIBS    := -laio -lxml2 -lpthread -luuid -lxxhash -lz

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
.PHONY: all check check-powerfail unit unit-asan protocol-asan integration demo bench install deps clean format
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

$(BUILD)/bin/ploop: $(call obj,$(PLOOP_SRC)) $(CLIENT_A) $(TLS_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(SAN) -pthread -o $@ $^ $(LDFLAGS) $(LIBS) -lblkid -lm -lgnutls

$(BUILD)/bin/ploop-nbd: $(call obj,$(NBD_SRC)) $(CLIENT_A) $(TLS_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(SAN) -pthread -o $@ $^ $(LDFLAGS) $(LIBS) -luring -lblkid -lgnutls

$(BUILD)/bin/ploop-container: $(call obj,$(CT_SRC)) $(CLIENT_A) $(TLS_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(SAN) -pthread -o $@ $^ $(LDFLAGS) $(LIBS) -lblkid -lz -lseccomp -lgnutls

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

demo: deps
	$(MAKE) all
	scripts/demo.sh

bench: deps
	$(MAKE) all
	scripts/bench/run.sh

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
	rm -rf build build-asan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
