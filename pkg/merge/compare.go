package merge

import (
	"cmp"
	"reflect"
	"sort"
)

// compareDeep is a total order on values of the same type, consistent with
// reflect.DeepEqual: 0 exactly when the values are deeply equal. It orders
// documents that share a ServerID, which must not depend on input order. JSON
// would not do: it cannot tell a nil slice from an empty one (omitempty), nor
// two times within a second, and the merge result can.
//
// It walks unexported fields too (time.Time's); the types here hold no
// cycles, funcs or channels.
func compareDeep(a, b reflect.Value) int {
	switch a.Kind() {
	case reflect.Bool:
		return cmp.Compare(b2i(a.Bool()), b2i(b.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return cmp.Compare(a.Int(), b.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return cmp.Compare(a.Uint(), b.Uint())
	case reflect.Float32, reflect.Float64:
		return cmp.Compare(a.Float(), b.Float())
	case reflect.String:
		return cmp.Compare(a.String(), b.String())
	case reflect.Pointer, reflect.Interface:
		if c := nilFirst(a.IsNil(), b.IsNil()); c != 0 || a.IsNil() {
			return c
		}
		if a.Kind() == reflect.Interface {
			ea, eb := a.Elem(), b.Elem()
			if c := cmp.Compare(ea.Type().String(), eb.Type().String()); c != 0 {
				return c
			}
			return compareDeep(ea, eb)
		}
		return compareDeep(a.Elem(), b.Elem())
	case reflect.Slice:
		if c := nilFirst(a.IsNil(), b.IsNil()); c != 0 || a.IsNil() {
			return c
		}
		fallthrough
	case reflect.Array:
		for i := 0; i < min(a.Len(), b.Len()); i++ {
			if c := compareDeep(a.Index(i), b.Index(i)); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.Len(), b.Len())
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if c := compareDeep(a.Field(i), b.Field(i)); c != 0 {
				return c
			}
		}
		return 0
	case reflect.Map:
		if c := nilFirst(a.IsNil(), b.IsNil()); c != 0 || a.IsNil() {
			return c
		}
		ka, kb := sortedKeys(a), sortedKeys(b)
		for i := 0; i < min(len(ka), len(kb)); i++ {
			if c := compareDeep(ka[i], kb[i]); c != 0 {
				return c
			}
			if c := compareDeep(a.MapIndex(ka[i]), b.MapIndex(kb[i])); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(ka), len(kb))
	}
	return 0
}

func nilFirst(aNil, bNil bool) int { return cmp.Compare(b2i(!aNil), b2i(!bNil)) }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sortedKeys(m reflect.Value) []reflect.Value {
	keys := m.MapKeys()
	sort.Slice(keys, func(i, j int) bool { return compareDeep(keys[i], keys[j]) < 0 })
	return keys
}
