package shard

import "context"

// Token identifies one claim of a shard. A Member puts it in the context
// of the work it grants (see Member.Hold), so that the work's writes can
// be made conditional on the claim still standing: a write through the
// etcd adapter's fenced path is refused once another member has claimed
// the shard.
type Token struct {
	// Shard is the claimed shard.
	Shard int
	// Value is the fencing token: a later claim of the shard has a larger
	// one.
	Value int64
	// Record is the name of the claim's record at the backend (for etcd,
	// its key).
	Record string
}

type tokenKey struct{}

// WithToken returns a copy of ctx that carries t.
func WithToken(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, tokenKey{}, t)
}

// TokenFrom returns the Token ctx carries, if any.
func TokenFrom(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(Token)
	return t, ok
}
