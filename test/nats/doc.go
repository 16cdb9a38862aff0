// Package nats holds the tests of the NATS JetStream KV adapter, and of the
// mirror fed by it, against a real nats-server started in-process on
// loopback, and its runnable examples.
package nats
