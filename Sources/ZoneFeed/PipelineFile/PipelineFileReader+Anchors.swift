// libyaml itself, as Yams builds it: Yams' Parser composes a whole document and does not hand
// out the events or tokens it reads.
import CYaml

extension PipelineFileReader {
    static let anchorsAndAliasesRefused =
        "YAML anchors and aliases (&name, *name) are not taken in a pipeline file; write the value out where it is used"

    /// Where the file's first anchor (`&name`) or alias (`*name`) is written; nil when it has
    /// none, or when libyaml's scanner stops at a syntax error before one (`Yams.compose` then
    /// reports that error where it is).
    ///
    /// Looked for before composing, because composing is where an alias costs: aliases share
    /// their anchor's node, and Yams hashes a mapping's keys to find duplicates, recursing
    /// through every shared subtree, so a 400-byte file of nested aliases (a "billion laughs")
    /// takes exponential time, and any reader walking the tree after it would too. A pipeline
    /// file has no use for them. The scanner's tokens, not a search of the text: an `&` or `*`
    /// inside a quoted or plain value (`password: "a&b*c"`) is no anchor.
    func firstAnchorOrAlias() -> PipelinePosition? {
        var text = yaml
        guard !text.isEmpty else { return nil }
        return text.withUTF8 { bytes -> PipelinePosition? in
            var parser = yaml_parser_t()
            guard yaml_parser_initialize(&parser) == 1 else { return nil }
            defer { yaml_parser_delete(&parser) }
            yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING)
            yaml_parser_set_input_string(&parser, bytes.baseAddress, bytes.count)
            var token = yaml_token_t()
            // > The initial token has the type YAML_STREAM_START_TOKEN while the ending token
            // > has the type YAML_STREAM_END_TOKEN. An application is responsible for freeing
            // > any buffers associated with the produced token object using the
            // > yaml_token_delete function.  (yaml.h, yaml_parser_scan)
            while yaml_parser_scan(&parser, &token) == 1 {
                defer { yaml_token_delete(&token) }
                switch token.type {
                case YAML_ANCHOR_TOKEN, YAML_ALIAS_TOKEN:
                    // libyaml's marks count from 0, as Yams' `Mark` does not.
                    return PipelinePosition(line: Int(token.start_mark.line) + 1, column: Int(token.start_mark.column) + 1)
                case YAML_STREAM_END_TOKEN:
                    return nil
                default:
                    continue
                }
            }
            return nil
        }
    }
}
