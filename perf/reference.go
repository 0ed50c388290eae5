package perf

// rustReference holds the figures a prior Rust implementation of the same
// protocol published for its dev VM (docs/perf.md prints them beside ours):
// two release runs, 2 s
// per schedule (120 frames), router and clients in one process on a
// 4-CPU VM, each cell the range over the two runs. Keys are report rows;
// the values are for 1, 2 and 4 agents.
var rustReference = map[string][3]string{
	rowFrames:    {"120 (0)", "120 (0)", "120 (0 and 3)"},
	rowRPC:       {"0.51-0.60 / 0.84-1.47 / 1.12-2.05", "0.76-0.78 / 1.34-2.21 / 2.14-6.18", "1.04-1.08 / 1.67-5.01 / 2.06-10.02"},
	rowAllocate:  {"0.96-1.01 / 1.13-1.28 / 1.34-1.49", "0.98-1.02 / 1.22-3.50 / 1.82-5.61", "0.80-0.94 / 1.15-5.32 / 1.31-6.60"},
	rowFill:      {"0.37-0.38 / 0.45-0.49 / 0.67-0.75", "0.37 / 0.45 / 0.51-0.55", "0.36-0.39 / 0.41-0.49 / 0.48-0.77"},
	rowSeal:      {"1.31-1.35 / 1.65-1.73 / 1.89-1.90", "1.27-1.42 / 1.69-4.97 / 1.87-7.41", "1.14-1.30 / 1.64-5.33 / 1.72-7.00"},
	rowPublish:   {"0.41-0.42 / 0.61-0.85 / 0.68-1.11", "0.41-0.43 / 0.83-1.07 / 1.17-3.10", "0.42-0.49 / 0.73-2.75 / 1.52-4.54"},
	rowAccess:    {"0.65-0.75 / 1.19-1.53 / 1.45-1.92", "0.76-0.91 / 1.45-2.20 / 1.76-6.02", "0.89-0.99 / 1.67-4.85 / 2.04-6.38"},
	rowRouterCPU: {"0.175-0.185", "0.200", "0.175-0.215"},
	rowTotalCPU:  {"0.325-0.335", "0.410-0.425", "0.370-0.460"},
	rowMemory:    {"11.2-13.6 / 13.6-14.4 MB", "11.8-14.1 / 15.0 MB", "15.7-15.8 / 16.4-16.6 MB"},
	rowStore:     {"3.7 MB / 0", "3.7 MB / 0", "3.7 MB / 0"},
	rowRoots:     {"5-6 / 0", "6 / 0", "5-6 / 0"},
	rowQueue:     {"1 / 0", "1 / 0", "1 / 0"},
	rowLag:       {"63.5-74.7 ms", "73.6-83.0 ms", "44.1-68.2 ms"},
	rowConsumers: {"120, 120, 49 (0, 0, 70-71)", "120, 120, 49 (0, 0, 71)", "120, 120, 47-49 (0, 0, 70-71)"},
}

// rustFor returns the Rust figure of a row for an agent count, or "".
func rustFor(row string, agents int) string {
	ref, ok := rustReference[row]
	if !ok {
		return ""
	}
	switch agents {
	case 1:
		return ref[0]
	case 2:
		return ref[1]
	case 4:
		return ref[2]
	}
	return ""
}
