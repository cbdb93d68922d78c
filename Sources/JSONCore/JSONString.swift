/// JSON string literals, written one way for the whole package: the JWT's header and claims,
/// the results and events Herald publishes (`JSONValue`) and its JSON log lines.
///
/// `"` and `\` are escaped, and so is every control character below U+0020 (`\n`, `\r`, `\t`
/// by name, the rest as `\u00XX`); everything else, non-ASCII included, is copied as UTF-8.
package enum JSONString {
    /// Appends `text` as a JSON string literal, quotes included.
    package static func write(_ text: String, to output: inout [UInt8]) {
        var text = text
        text.withUTF8 { write($0, to: &output) }
    }

    /// Appends the UTF-8 `bytes` as a JSON string literal, quotes included.
    static func write(_ bytes: UnsafeBufferPointer<UInt8>, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        // The common case (IDs, tokens, names): one copy, checked over the contiguous bytes
        // rather than through String's UTF-8 view.
        guard bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
            output.append(contentsOf: bytes)
            return output.append(UInt8(ascii: "\""))
        }
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): output.append(contentsOf: #"\\"#.utf8)
            case 0x0A: output.append(contentsOf: #"\n"#.utf8)
            case 0x0D: output.append(contentsOf: #"\r"#.utf8)
            case 0x09: output.append(contentsOf: #"\t"#.utf8)
            case 0x00..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                output.append(contentsOf: #"\u00"#.utf8)
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0xF)])
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }

    /// `text` as a JSON string literal, quotes included.
    package static func quoted(_ text: String) -> String {
        var output: [UInt8] = []
        write(text, to: &output)
        return String(decoding: output, as: UTF8.self)
    }
}
