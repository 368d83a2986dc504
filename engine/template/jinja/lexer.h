// lexer.h — splits a template into text and tag tokens with jinja2's whitespace rules
// (trim_blocks, lstrip_blocks, `-`/`+` modifiers, comments, raw blocks).
#pragma once
#include <string>
#include <vector>

namespace spark::jinja {

enum class TokenType {
  TEXT,         // template data between tags
  VAR_BEGIN,    // {{
  VAR_END,      // }}
  BLOCK_BEGIN,  // {%
  BLOCK_END,    // %}
  NAME,
  STRING,       // value holds the unescaped literal
  INTEGER,
  FLOAT,
  OP,           // operator or punctuation: + - * / // % ** ~ ( ) [ ] { } . , : | = == != < <= > >=
  END_OF_INPUT,
};

struct Token {
  TokenType type;
  std::string value;
  int line;
};

struct LexerOptions {
  bool trim_blocks = true;    // transformers' environment
  bool lstrip_blocks = true;
};

// Throws TemplateError (with the line) for unterminated tags, strings, comments and raw
// blocks, and for characters that are not part of the expression language.
std::vector<Token> tokenize(const std::string& source, const LexerOptions& options = {});

}  // namespace spark::jinja
