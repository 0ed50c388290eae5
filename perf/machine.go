package perf

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/klauspost/cpuid/v2"
	"golang.org/x/sys/unix"
)

// Machine describes the host the figures were measured on.
type Machine struct {
	CPU            string `json:"cpu"`
	LogicalCores   int    `json:"logicalCores"`
	PhysicalCores  int    `json:"physicalCores"`
	ThreadsPerCore int    `json:"threadsPerCore"`
	// Cache sizes in bytes as cpuid reports them (per core or shared);
	// -1 when not detected.
	L1d       int    `json:"l1dBytes"`
	L2        int    `json:"l2Bytes"`
	L3        int    `json:"l3Bytes"`
	CacheLine int    `json:"cacheLineBytes"`
	Hyper     string `json:"hypervisor,omitempty"`
	Kernel    string `json:"kernel"` // uname: sysname release machine
	Go        string `json:"go"`
	NumCPU    int    `json:"numCPU"`
	MaxProcs  int    `json:"gomaxprocs"`
}

func describeMachine() Machine {
	c := cpuid.CPU
	m := Machine{CPU: strings.TrimSpace(c.BrandName), LogicalCores: c.LogicalCores, PhysicalCores: c.PhysicalCores,
		ThreadsPerCore: c.ThreadsPerCore, L1d: c.Cache.L1D, L2: c.Cache.L2, L3: c.Cache.L3, CacheLine: c.CacheLine,
		Go: runtime.Version(), NumCPU: runtime.NumCPU(), MaxProcs: runtime.GOMAXPROCS(0)}
	if c.HypervisorVendorID != cpuid.VendorUnknown {
		m.Hyper = c.HypervisorVendorID.String()
	}
	if m.CPU == "" {
		m.CPU = "unknown CPU"
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		m.Kernel = fmt.Sprintf("%s %s %s", unix.ByteSliceToString(u.Sysname[:]),
			unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:]))
	} else {
		m.Kernel = runtime.GOOS + " " + runtime.GOARCH
	}
	return m
}

// Line is the machine line the report starts with.
func (m Machine) Line() string {
	cores := fmt.Sprintf("%d logical cores", m.NumCPU)
	if m.PhysicalCores > 0 {
		cores += fmt.Sprintf(" (%d physical, %d per core)", m.PhysicalCores, max(m.ThreadsPerCore, 1))
	}
	hyper := ""
	if m.Hyper != "" {
		hyper = ", under " + m.Hyper
	}
	return fmt.Sprintf("%s, %s%s; L1d %s, L2 %s, L3 %s, %d-byte lines (cpuid); %s; %s, GOMAXPROCS %d",
		m.CPU, cores, hyper, cacheSize(m.L1d), cacheSize(m.L2), cacheSize(m.L3), m.CacheLine, m.Kernel, m.Go, m.MaxProcs)
}

func cacheSize(n int) string {
	switch {
	case n <= 0:
		return "unknown"
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
