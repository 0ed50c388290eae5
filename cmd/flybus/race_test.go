//go:build race

package main

// raceBuild makes the end-to-end tests build the binary with -race too, so
// the serve process is checked as strictly as the test process.
const raceBuild = true
