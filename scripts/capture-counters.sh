#!/usr/bin/env bash
# capture-counters.sh: print (default) or run the `perf stat` command that captures ddioscope's DDIO uncore
# counters on this host, for machines where ddioscope itself cannot run. Import the CSV with ddioscope.
#
# Usage:
#   capture-counters.sh                       print the command for this CPU
#   capture-counters.sh --run SECONDS OUT.csv run it for SECONDS, writing OUT.csv
#   options: --platform SKX|CLX|ICX|SPR|EMR|GNR (skip detection), --cpuinfo FILE (detect from FILE)
#
# The event lists below mirror user/src/counters/events.rs (the essential set); a unit test
# (counters::tests::capture_script_matches_event_table) fails when they drift apart.
set -euo pipefail

die() {
	printf 'capture-counters.sh: %s\n' "$*" >&2
	exit 1
}

# Intel mapfile.csv rules: family 6 model 0x55 stepping 0-4 SKX, 5-F CLX; 0x6A/0x6C ICX; 0x8F SPR;
# 0xCF EMR; 0xAD/0xAE GNR.
detect_platform() {
	local cpuinfo=$1 vendor family model stepping
	vendor=$(awk -F': *' '/^vendor_id/ {print $2; exit}' "$cpuinfo")
	family=$(awk -F': *' '/^cpu family/ {print $2; exit}' "$cpuinfo")
	model=$(awk -F': *' '/^model[[:space:]]*:/ {print $2; exit}' "$cpuinfo")
	stepping=$(awk -F': *' '/^stepping/ {print $2; exit}' "$cpuinfo")
	[[ $vendor == GenuineIntel ]] || die "vendor ${vendor:-unknown}: no DDIO uncore events"
	[[ $family == 6 ]] || die "Intel family ${family:-?} is not a supported Xeon server part"
	case $model in
	85) if ((${stepping:-0} <= 4)); then echo SKX; else echo CLX; fi ;;
	106 | 108) echo ICX ;;
	143) echo SPR ;;
	207) echo EMR ;;
	173 | 174) echo GNR ;;
	*) die "$(printf 'Intel model 0x%X not a supported Xeon server part' "$model")" ;;
	esac
}

events_SKX() {
	cat <<'EOF'
# BEGIN EVENTS SKX
uncore_cha/event=0x35,umask=0x34,filter_rem=1,filter_loc=1,filter_opc0=0x248,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x14,filter_rem=1,filter_loc=1,filter_opc0=0x248,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x24,filter_rem=1,filter_loc=1,filter_opc0=0x248,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x34,filter_rem=1,filter_loc=1,filter_opc0=0x21e,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x14,filter_rem=1,filter_loc=1,filter_opc0=0x21e,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x24,filter_rem=1,filter_loc=1,filter_opc0=0x21e,filter_nm=1,filter_not_nm=1/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x8,fc_mask=0x7/
uncore_imc/event=0x4,umask=0x3/
uncore_imc/event=0x4,umask=0xc/
cpu/event=0xd1,umask=0x20/
# END EVENTS SKX
EOF
}

events_CLX() {
	cat <<'EOF'
# BEGIN EVENTS CLX
uncore_cha/event=0x35,umask=0x34,filter_rem=1,filter_loc=1,filter_opc0=0x248,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x14,filter_rem=1,filter_loc=1,filter_opc0=0x248,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x24,filter_rem=1,filter_loc=1,filter_opc0=0x248,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x34,filter_rem=1,filter_loc=1,filter_opc0=0x21e,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x14,filter_rem=1,filter_loc=1,filter_opc0=0x21e,filter_nm=1,filter_not_nm=1/
uncore_cha/event=0x35,umask=0x24,filter_rem=1,filter_loc=1,filter_opc0=0x21e,filter_nm=1,filter_not_nm=1/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x8,fc_mask=0x7/
uncore_imc/event=0x4,umask=0x3/
uncore_imc/event=0x4,umask=0xc/
cpu/event=0xd1,umask=0x20/
# END EVENTS CLX
EOF
}

events_ICX() {
	cat <<'EOF'
# BEGIN EVENTS ICX
uncore_cha/event=0x35,umask=0xcc43ff04/
uncore_cha/event=0x35,umask=0xcc43fd04/
uncore_cha/event=0x35,umask=0xcc43fe04/
uncore_cha/event=0x35,umask=0xcd43ff04/
uncore_cha/event=0x35,umask=0xcd43fd04/
uncore_cha/event=0x35,umask=0xcd43fe04/
uncore_cha/event=0x35,umask=0xc8f3ff04/
uncore_cha/event=0x35,umask=0xc8f3fd04/
uncore_cha/event=0x35,umask=0xc8f3fe04/
uncore_cha/event=0x35,umask=0xcc23ff04/
uncore_cha/event=0x35,umask=0xc8c3ff04/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x10,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x10,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x20,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x20,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x40,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x40,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x80,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x80,fc_mask=0x7/
uncore_imc/event=0x4,umask=0xf/
uncore_imc/event=0x4,umask=0x30/
cpu/event=0xd1,umask=0x20/
# END EVENTS ICX
EOF
}

events_SPR() {
	cat <<'EOF'
# BEGIN EVENTS SPR
uncore_cha/event=0x35,umask=0xcc43ff04/
uncore_cha/event=0x35,umask=0xcc43fd04/
uncore_cha/event=0x35,umask=0xcc43fe04/
uncore_cha/event=0x35,umask=0xcd43ff04/
uncore_cha/event=0x35,umask=0xcd43fd04/
uncore_cha/event=0x35,umask=0xcd43fe04/
uncore_cha/event=0x35,umask=0xc8f3ff04/
uncore_cha/event=0x35,umask=0xc8f3fd04/
uncore_cha/event=0x35,umask=0xc8f3fe04/
uncore_cha/event=0x35,umask=0xcc23ff04/
uncore_cha/event=0x35,umask=0xc8c3ff04/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x10,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x10,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x20,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x20,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x40,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x40,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x80,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x80,fc_mask=0x7/
uncore_imc/event=0x5,umask=0xcf/
uncore_imc/event=0x5,umask=0xf0/
cpu/event=0xd1,umask=0x20/
# END EVENTS SPR
EOF
}

events_EMR() {
	cat <<'EOF'
# BEGIN EVENTS EMR
uncore_cha/event=0x35,umask=0xcc43ff04/
uncore_cha/event=0x35,umask=0xcc43fd04/
uncore_cha/event=0x35,umask=0xcc43fe04/
uncore_cha/event=0x35,umask=0xcd43ff04/
uncore_cha/event=0x35,umask=0xcd43fd04/
uncore_cha/event=0x35,umask=0xcd43fe04/
uncore_cha/event=0x35,umask=0xc8f3ff04/
uncore_cha/event=0x35,umask=0xc8f3fd04/
uncore_cha/event=0x35,umask=0xc8f3fe04/
uncore_cha/event=0x35,umask=0xcc23ff04/
uncore_cha/event=0x35,umask=0xc8c3ff04/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x10,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x10,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x20,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x20,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x40,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x40,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x80,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x80,fc_mask=0x7/
uncore_imc/event=0x5,umask=0xcf/
uncore_imc/event=0x5,umask=0xf0/
cpu/event=0xd1,umask=0x20/
# END EVENTS EMR
EOF
}

events_GNR() {
	cat <<'EOF'
# BEGIN EVENTS GNR
uncore_cha/event=0x35,umask=0xcc43ff04/
uncore_cha/event=0x35,umask=0xcc43fd04/
uncore_cha/event=0x35,umask=0xcc43fe04/
uncore_cha/event=0x35,umask=0xcd43ff04/
uncore_cha/event=0x35,umask=0xcd43fd04/
uncore_cha/event=0x35,umask=0xcd43fe04/
uncore_cha/event=0x35,umask=0xc8f3ff04/
uncore_cha/event=0x35,umask=0xc8f3fd04/
uncore_cha/event=0x35,umask=0xc8f3fe04/
uncore_cha/event=0x35,umask=0xcc23ff04/
uncore_cha/event=0x35,umask=0xc8c3ff04/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x1,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x2,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x4,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x8,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x10,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x10,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x20,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x20,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x40,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x40,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x1,ch_mask=0x80,fc_mask=0x7/
uncore_iio/event=0x83,umask=0x4,ch_mask=0x80,fc_mask=0x7/
uncore_imc/event=0x5,umask=0xcf/
uncore_imc/event=0x5,umask=0xf0/
uncore_imc/event=0x6,umask=0xcf/
uncore_imc/event=0x6,umask=0xf0/
cpu/event=0xd1,umask=0x20/
# END EVENTS GNR
EOF
}

events_for() {
	case $1 in
	SKX | CLX | ICX | SPR | EMR | GNR) "events_$1" | grep -v '^#' | paste -sd, - ;;
	*) die "unknown platform $1 (want SKX, CLX, ICX, SPR, EMR or GNR)" ;;
	esac
}

main() {
	local platform="" cpuinfo=/proc/cpuinfo run_secs="" out=""
	while (($# > 0)); do
		case $1 in
		--platform)
			platform=${2:?--platform needs a name}
			shift 2
			;;
		--cpuinfo)
			cpuinfo=${2:?--cpuinfo needs a file}
			shift 2
			;;
		--run)
			run_secs=${2:?--run needs SECONDS}
			out=${3:?--run needs OUT.csv}
			shift 3
			;;
		-h | --help)
			sed -n '2,10p' "$0"
			exit 0
			;;
		*) die "unknown argument $1 (try --help)" ;;
		esac
	done
	[[ -n $platform ]] || platform=$(detect_platform "$cpuinfo")
	platform=${platform^^}
	local events
	events=$(events_for "$platform")

	if [[ -z $run_secs ]]; then
		printf "perf stat -a -I 1000 -x, --per-socket -e '%s'\n" "$events"
		return
	fi
	[[ $run_secs =~ ^[0-9]+$ ]] || die "--run SECONDS must be a whole number, got $run_secs"
	command -v perf >/dev/null || die "perf not found (install linux-tools for this kernel)"
	# The platform line lets the importer resolve raw encodings without guessing.
	printf '# ddioscope-platform: %s\n' "$platform" >"$out"
	perf stat -a -I 1000 -x, --per-socket --append -o "$out" -e "$events" -- sleep "$run_secs"
	printf 'wrote %s (%s)\n' "$out" "$platform" >&2
}

main "$@"
