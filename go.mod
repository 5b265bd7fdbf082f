module github.com/pinplan/pinplan

go 1.26.0

require github.com/BurntSushi/toml v1.6.0
