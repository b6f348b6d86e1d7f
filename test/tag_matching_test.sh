#!/bin/sh
# NVIDIA's tag-matching test, as rdma-core ships it (Debian's
# python3-pyverbs: /usr/share/doc/rdma-core/tests, partly gzipped), on the
# software NIC through the test-only interposer (test/interpose):
#   run_tests.py --dev soft -v test_tag_matching
# Its 4 tests (test_tm_traffic, test_tm_no_tag, test_tm_unexpected_tag,
# test_tm_rndv) must all run and pass: a skipped test is a failure, so
# unittest's summary must say "Ran 4 tests" and "OK" with no "skipped".
#
# rdma-core 56's test base reads "rdma link show -j" (iproute2) for the
# device's network interface; without RDMA kernel support that fails, so a
# shim in PATH answers it for the software NIC (a port, no netdev).
set -u
build=${RC_TM_BUILDDIR:?}
ipose=$build/test/interpose/.libs/libsoftnic_verbs.so
dev=${RC_TM_SOFT_DEV:-soft}
tests_src=${RC_TM_RDMA_CORE_TESTS:-/usr/share/doc/rdma-core/tests}
python=/usr/bin/python3      # Debian's: pyverbs is installed for it
tmo=${RC_TM_TM_TIMEOUT:-120}
expected='test_tm_traffic test_tm_no_tag test_tm_unexpected_tag test_tm_rndv'

[ -f "$ipose" ] || { echo "FAIL: $ipose not built"; exit 1; }
[ -f "$tests_src/run_tests.py" ] || {
    echo "FAIL: $tests_src/run_tests.py not found: install Debian's python3-pyverbs (contrib/setup.sh does)"
    exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The tests, unpacked: a package named tests (run_tests.py loads it)
mkdir "$tmp/tests" "$tmp/bin"
cp -r "$tests_src"/. "$tmp/tests/"
find "$tmp/tests" -name '*.gz' -exec gunzip -f {} +

cat > "$tmp/bin/rdma" <<EOF
#!/bin/sh
# rdma-core's test base asks for the device's ports and their netdevs
if [ "\$*" = "link show -j" ]; then
    echo '[{"ifindex":1,"ifname":"$dev","port":1,"state":"ACTIVE","physical_state":"LINK_UP"}]'
    exit 0
fi
echo "rdma shim (test/tag_matching_test.sh): only 'link show -j'" >&2
exit 1
EOF
chmod +x "$tmp/bin/rdma"

echo "run: (cd $tmp/tests && LD_PRELOAD=$ipose $python run_tests.py --dev $dev -v test_tag_matching)"
rc=0
(cd "$tmp/tests" && PATH=$tmp/bin:$PATH LD_PRELOAD=$ipose \
    timeout "$tmo" "$python" run_tests.py --dev "$dev" -v test_tag_matching) \
    > "$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"

fails=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }
[ "$rc" -eq 0 ] || fail "run_tests.py exited $rc"
grep -q '^Ran 4 tests' "$tmp/out" || fail "not 'Ran 4 tests'"
grep -Eq '^OK$' "$tmp/out" || fail "unittest's summary is not a plain OK (skips count as failures)"
! grep -q 'skipped' "$tmp/out" || fail "a test was skipped"
# unittest -v: "name (module.Class.name)", its docstring's first line
# when it has one, then "... ok"
for t in $expected; do
    grep -q "^$t (" "$tmp/out" || fail "$t did not run"
done
[ "$(grep -c '\.\.\. ok$' "$tmp/out")" -eq 4 ] || fail "not 4 results '... ok'"
if [ "$fails" -eq 0 ]; then
    echo "PASS: test_tag_matching, all 4 tests ran and passed"
fi
[ "$fails" -eq 0 ]
