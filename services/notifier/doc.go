// Package main will be the SSE notifier (issue 5).
package main

func main() {}
