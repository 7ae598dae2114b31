module mcpmon.test/openslo

go 1.24

require github.com/OpenSLO/go-sdk v0.6.2

require (
	github.com/nobl9/govy v0.19.1 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/mod v0.25.0 // indirect
	golang.org/x/sync v0.15.0 // indirect
	golang.org/x/tools v0.34.0 // indirect
	sigs.k8s.io/yaml v1.5.0 // indirect
)
