module github.com/flybus/flybus

go 1.26.0

require golang.org/x/sys v0.50.0

require github.com/goccy/go-json v0.12.0

require github.com/klauspost/cpuid/v2 v2.4.2

require github.com/edsrzf/mmap-go v1.2.0
