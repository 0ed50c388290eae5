// Package conformance keeps docs/conformance.md honest. The report audits
// this module against the Flybus v1 draft, one row per normative sentence,
// and names the tests that prove each row. The package holds no code: its
// test reads the report and fails when a named test does not exist, when a
// row claims "conforms" without naming a test, when a status is not one of
// the report's three, or when the counts at the top disagree with the rows.
package conformance
