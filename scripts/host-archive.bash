# Sourced by scripts that debootstrap (install-criu.sh, debian-rootfs.sh):
# host_archive prints the Debian archive the host's own apt sources use.
# "URI SUITE" of the first Debian archive in the host's apt sources:
# deb822 .sources first, then the one-line format.
host_archive() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
         {
           uri = ""; suite = ""; types = ""
           for (i = 1; i <= NF; i++) {
             if ($i ~ /^URIs:/)   { uri = $i;   sub(/^URIs:[ \t]*/, "", uri);   sub(/[ \t].*/, "", uri) }
             if ($i ~ /^Suites:/) { suite = $i; sub(/^Suites:[ \t]*/, "", suite); sub(/[ \t].*/, "", suite) }
             if ($i ~ /^Types:/)  { types = $i }
           }
           if (uri != "" && suite != "" && types ~ /deb([ \t]|$)/ && suite !~ /security/ && uri !~ /security/) {
             print uri, suite; exit
           }
         }' "$f"
  done
  local l
  for l in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $l ]] || continue
    awk '$1 == "deb" {
           i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
           if ($i !~ /security/ && $(i + 1) !~ /security/) { print $i, $(i + 1); exit }
         }' "$l"
  done
}
