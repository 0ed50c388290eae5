// Package client will hold the flybus SDK: one Client per connection serving
// RPC, pub/sub and artifacts, with explicit, idempotent Close on every handle
// that owns something on the router.
package client
