// Package sweep turns a command template and lists of parameter values into
// job lines, one per configuration: the full grid in random or
// grid order, or N distinct configurations drawn uniformly.
//
// A configuration is a number below the grid's size, read in mixed radix
// with the last parameter varying fastest; the grid itself is never built.
// A shuffled grid is a permutation of those numbers, and a sample of N is
// the first N of a uniform shuffle, drawn with Floyd's algorithm in O(N)
// memory, so a sample of a grid of 10^12 configurations is cheap.
//
// Values are substituted shell-quoted (a plain word stays as it is), so a
// value with spaces, quotes or $ reaches the job as one argument, unchanged.
package sweep
