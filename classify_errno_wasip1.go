//go:build wasip1

package httpretry

// errHostDown stands for EHOSTDOWN, which WASI does not define: Winsock's
// number, which no WASI call returns.
const errHostDown = wsaEHOSTDOWN
