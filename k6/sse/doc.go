// Package sse is a k6 extension, k6/x/sse, that lets a virtual user listen on
// a Server-Sent Events stream until a terminal event or a timeout.
package sse
