module github.com/listwatch/mirror

go 1.25
