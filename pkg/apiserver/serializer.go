package apiserver

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// NegotiatedSerializer offers JSON and YAML only. The types have no
// protobuf encoding, and clients such as the garbage collector ask for
// "protobuf, then JSON": advertising protobuf would make them fail with
// 406 instead of falling back to JSON.
var NegotiatedSerializer runtime.NegotiatedSerializer = withoutProtobuf{Codecs}

type withoutProtobuf struct {
	runtime.NegotiatedSerializer
}

func (s withoutProtobuf) SupportedMediaTypes() []runtime.SerializerInfo {
	all := s.NegotiatedSerializer.SupportedMediaTypes()
	out := make([]runtime.SerializerInfo, 0, len(all))
	for _, info := range all {
		if info.MediaType != runtime.ContentTypeProtobuf {
			out = append(out, info)
		}
	}
	return out
}
