/// The explicit `recordTypes:` section of a pipeline file that yields `mappings`: what
/// `zonefeed schema mapping` prints for those who would rather edit the mapping than derive it.
///
/// Written by hand rather than through Yams' emitter, which cannot write the comments that say
/// why a name is not the plain snake_case of its CloudKit name.
public enum RecordTypesYAML {
    public static func text(_ mappings: [PostgresRecordTypeMapping], header: [String] = []) -> String {
        var lines = header.map { "# \($0)" }
        lines.append("recordTypes:")
        for mapping in mappings {
            lines.append("  \(scalar(mapping.recordType)):")
            if let renamed = mapping.renamedTable { lines.append("    # table \(renamed)") }
            lines.append("    table: \(scalar(mapping.table))")
            guard !mapping.fields.isEmpty else { continue }
            lines.append("    fields:")
            // By name, made once: a search of the renamed ones at each field was quadratic.
            let renamedFields = Dictionary(grouping: mapping.renamed, by: \.cloudKitName)
            for field in mapping.fields {
                for renamed in renamedFields[field.field] ?? [] {
                    lines.append("      # \(renamed)")
                }
                let type = scalar(field.type.rawValue)
                if field.column == field.field.snakeCased && !field.indexed {
                    lines.append("      \(scalar(field.field)): \(type)")
                } else {
                    let index = field.indexed ? ", index: true" : ""
                    let flowType = scalar(field.type.rawValue, inFlow: true)
                    lines.append("      \(scalar(field.field)): { column: \(scalar(field.column, inFlow: true)), type: \(flowType)\(index) }")
                }
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// A name or type as a YAML scalar: plain when it is letters, digits, `_`, spaces and `[]`
    /// (outside a flow mapping: inside `{ … }`, `[` begins a sequence, and `text[]` printed plain
    /// there made a file zonefeed refused) and cannot read as anything but a string; else
    /// double-quoted with JSON's escapes.
    static func scalar(_ text: String, inFlow: Bool = false) -> String {
        let marks = inFlow ? "_ " : "_ []"
        let plain =
            !text.isEmpty && text.first!.isLetter && text.last != " "
            && text.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || marks.unicodeScalars.contains($0)) }
            && !["true", "false", "yes", "no", "on", "off", "null", "y", "n"].contains(text.lowercased())
        if plain { return text }
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
