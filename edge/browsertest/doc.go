// Package browsertest drives the flybus edge's viewer in headless
// Chromium: a module of its own, so that chromedp stays out of the main
// module's dependencies. Its tests need a chromium (or chrome) binary on
// PATH, or FLYBUS_CHROMIUM naming one; without one they skip, except
// under CI (CI set), where they fail.
package browsertest
