//go:build !wasip1

package httpretry

import "syscall"

// errHostDown is the system's EHOSTDOWN (see classify_errno_wasip1.go).
const errHostDown = syscall.EHOSTDOWN
