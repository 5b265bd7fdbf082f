module github.com/pinplan/pinplan

go 1.26.0

require github.com/BurntSushi/toml v1.6.0

require (
	github.com/sashabaranov/go-openai v1.43.0 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
