//go:build !unix

package main

// hostileRole: the hostile programs of the security tests need Unix users.
func hostileRole() (int, bool) { return 0, false }
