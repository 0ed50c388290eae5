// Package readmecheck holds the tests of the repository's documentation:
// one builds every Go program in README.md and in the guide's pages
// (docs/guide/*.md) and runs those that embed their own router, so the
// documented code cannot drift from the packages it shows; another checks
// that every relative link of README.md and docs/ names a file and a
// heading that exist.
package readmecheck
