module github.com/listwatch/mirror/.ci

go 1.26.0

require (
	golang.org/x/exp v0.0.0-20260410095643-746e56fc9e2f
	golang.org/x/mod v0.41.0
	golang.org/x/tools v0.51.0
)

require golang.org/x/sync v0.23.0 // indirect
