// Package depcheck holds only a test: that the library packages of the
// module import nothing outside the standard library, the module itself
// and the four dependencies the project allows them. The executable may
// add what its job needs (client_golang for /metrics); a library may not.
package depcheck
