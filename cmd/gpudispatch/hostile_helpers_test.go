//go:build unix

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
)

// hostileRole runs this test binary as one of the hostile programs the
// security tests start as another Unix user, when the environment names
// one; it returns false when it names none.
func hostileRole() (exit int, ok bool) {
	switch {
	case os.Getenv("GPUDISPATCH_TEST_FLOOD") != "":
		return flood(os.Getenv("GPUDISPATCH_TEST_FLOOD"), os.Getenv("GPUDISPATCH_TEST_FLOOD_SOCKET")), true
	case os.Getenv("GPUDISPATCH_TEST_IMPOSTOR") != "":
		return impostor(os.Getenv("GPUDISPATCH_TEST_IMPOSTOR")), true
	}
	return 0, false
}

// flood opens as many connections to addr as it may (up to 20,000): a
// third idle, a third with a header never finished, a third after a
// request without the token; it tries the control socket too. It prints
// what it did, then holds them until its stdin ends.
func flood(addr, socket string) int {
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	lim.Cur = lim.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	n := min(20000, int(lim.Max)-64)
	if c, err := net.Dial("unix", socket); err == nil {
		fmt.Println("socket: connected")
		c.Close()
	} else {
		fmt.Printf("socket: %v\n", err)
	}
	var held []net.Conn
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			fmt.Printf("stopped at %d: %v\n", i, err)
			break
		}
		switch i % 3 {
		case 1:
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
		case 2:
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		}
		held = append(held, c)
	}
	fmt.Printf("opened %d\n", len(held))
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// impostor listens on the Unix socket path as a gpudispatch server would,
// open to everyone, and writes what any client sends it to path.got.
func impostor(path string) int {
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	os.Chmod(path, 0o777)
	got, err := os.OpenFile(path+".got", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("listening as " + strconv.Itoa(os.Getuid()))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				r := bufio.NewReader(c)
				b, _ := r.Peek(1)
				got.Write(b)
				io.Copy(got, r)
			}()
		}
	}()
	io.Copy(io.Discard, os.Stdin)
	return 0
}
