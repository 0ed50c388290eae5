// Package readmecheck holds the test that builds every Go program in the
// repository's README.md and runs those that embed their own router, so the
// README's code cannot drift from the packages it shows.
package readmecheck
