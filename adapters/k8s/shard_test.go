package k8s

import (
	"testing"
	"time"

	"github.com/listwatch/mirror/shard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRecordOf_ReadsGroupLeasesAndRefusesOthers(t *testing.T) {
	holder, none := "m-1", ""
	ttl, zero := int32(3), int32(0)
	transitions := int32(7)
	lease := func(kind, s string, holder *string, ttl, transitions *int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "l", ResourceVersion: "42", Labels: map[string]string{ShardKindLabel: kind}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: holder, LeaseDurationSeconds: ttl, LeaseTransitions: transitions},
		}
		if s != "" {
			l.Labels[ShardLabel] = s
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  shard.Record
		bad   bool
	}{
		{"member", lease("member", "", &holder, &ttl, nil), shard.Record{Name: "l", Member: holder, Shard: -1, Version: "42", TTL: 3 * time.Second}, false},
		{"claim", lease("claim", "5", &holder, nil, &transitions), shard.Record{Name: "l", Member: holder, Shard: 5, Token: 7, Version: "42"}, false},
		{"released claim", lease("claim", "5", &none, nil, &transitions), shard.Record{Name: "l", Shard: 5, Token: 7, Version: "42"}, false},
		{"member without holder", lease("member", "", nil, &ttl, nil), shard.Record{}, true},
		{"member without duration", lease("member", "", &holder, &zero, nil), shard.Record{}, true},
		{"claim without shard", lease("claim", "", &holder, nil, nil), shard.Record{}, true},
		{"claim of a negative shard", lease("claim", "-2", &holder, nil, nil), shard.Record{}, true},
		{"another kind", lease("other", "", &holder, &ttl, nil), shard.Record{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := recordOf(tc.lease)
			if tc.bad {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestNewShardBackend_NamesLeasesValidlyWhateverTheGroupAndID(t *testing.T) {
	for _, group := range []string{"web", "Web Controllers/EU", "a-very-long-group-name-that-is-longer-than-forty-characters"} {
		b := NewShardBackend(fake.NewClientset(), "ns", group)
		for _, name := range []string{b.MemberLeaseName("Replica A/ä-0f3c"), b.ClaimLeaseName(255)} {
			assert.Empty(t, validation.IsDNS1123Subdomain(name), "group %q: lease name %q", group, name)
		}
		assert.Empty(t, validation.IsValidLabelValue(b.label), "group %q: label %q", group, b.label)
		assert.NotEqual(t, b.MemberLeaseName("a"), b.MemberLeaseName("b"))
	}
}
