// Copyright The peerdiscovery Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

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
