package mirror

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mutedLW is a fakeLW with decimal versions whose CurrentVersion never
// answers: it waits until its context ends.
type mutedLW struct{ *fakeLW }

func (mutedLW) CompareVersions(a, b string) (int, error) { return source.CompareDecimalVersions(a, b) }

func (mutedLW) CurrentVersion(ctx context.Context) (string, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

func TestConsistent_SourceThatCannotSayItsVersionGetsAnErrorNamingTheAppliedVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := newFakeLW()
		lw.page("7", "", tobj{"a", "1"})
		lw.watch()
		inf := NewInformer[string, tobj](mutedLW{lw}, InformerOptions[string, tobj]{KeyFunc: tobjKey})
		runInformer(t, inf)
		require.NoError(t, inf.WaitForSync(t.Context()))

		_, err := inf.Consistent(t.Context(), ConsistentOptions{Timeout: time.Second})
		require.ErrorIs(t, err, ErrNotCurrent)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var se *StaleError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "7", se.Applied)
		assert.Empty(t, se.Want)
		assert.Regexp(t, `^mirror: cache at version 7, current version unknown: `, err.Error())
	})
}

func TestStaleError_SaysWhatItKnows(t *testing.T) {
	tests := []struct {
		err  StaleError
		want string
	}{
		{StaleError{Applied: "7", Want: "9", Err: ErrNotCurrent}, "mirror: cache at version 7, not 9: " + ErrNotCurrent.Error()},
		{StaleError{Want: "9", Err: ErrStopped}, "mirror: cache at version none, not 9: " + ErrStopped.Error()},
		{StaleError{Applied: "7", Err: ErrNotCurrent}, "mirror: cache at version 7, current version unknown: " + ErrNotCurrent.Error()},
		{StaleError{Err: ErrNotCurrent}, "mirror: cache at version none, current version unknown: " + ErrNotCurrent.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.err.Error())
		})
	}
}
