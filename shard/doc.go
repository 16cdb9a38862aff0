// Package shard divides work among the replicas of a controller: leader
// election, and shards that move between replicas with a fenced
// hand-over.
//
// The members of a group share a Backend (an etcd prefix through the etcd
// adapter, Kubernetes Leases through the Kubernetes adapter, or Memory in
// one process). Each Member keeps a lease there, mirrors the group's
// records with an informer, and computes with Assign which of the group's
// shards (DefaultShards contiguous ranges of the 64-bit FNV-1a hash space,
// see Hash, Of and RangeOf) are its own. It claims those once their
// previous holder released them or its lease ended, and grants work on
// their keys (Hold) only while its lease is sure to be current; the work's
// context carries the claim's Token, so that a write can be refused by the
// backend once the shard has moved on. With one shard, the group elects a
// leader.
//
// Most controllers use a Member through reconcile.Options.Shards, which
// reconciles only the keys of the member's shards. The Member's doc says
// exactly what a group guarantees.
package shard
