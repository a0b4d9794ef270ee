// Command gpudispatch runs a queue of shell commands on the GPUs of one or
// more machines. See README.md and the manual in docs/.
package main

import "os"

func main() {
	os.Exit(execute(os.Args[1:], streams{in: os.Stdin, out: os.Stdout, err: os.Stderr}))
}
