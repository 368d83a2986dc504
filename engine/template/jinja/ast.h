// ast.h — the syntax tree the parser builds and the evaluator walks: expressions and
// statements of the Jinja language as jinja2 defines them.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/template/jinja/value.h"

namespace spark::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  CONST, NAME, LIST, TUPLE, DICT, GETATTR, GETITEM, SLICE, CALL, FILTER, TEST, UNARY, BINARY,
  COMPARE, AND, OR, CONDITIONAL
};

enum class UnaryOp { NOT, NEG, POS };
enum class BinaryOp { ADD, SUB, MUL, DIV, FLOORDIV, MOD, POW, CONCAT, EQ, NE, LT, LE, GT, GE, IN, NOT_IN };

struct Expr {
  ExprKind kind;
  int line = 0;
  int depth = 1;                  // height of this subtree (bounded by the parser)
  Value constant;                 // CONST
  std::string name;               // NAME; GETATTR attribute; FILTER / TEST name
  std::vector<ExprPtr> items;     // LIST / TUPLE items; DICT keys and values alternating;
                                  // SLICE start, stop, step (null when absent)
  ExprPtr a, b, c;                // operands: GETATTR/GETITEM object (a) and index (b); CALL
                                  // callee (a); FILTER/TEST subject (a, null inside filter
                                  // blocks); UNARY (a); BINARY/AND/OR (a, b);
                                  // CONDITIONAL: then (a), test (b), else (c, may be null)
  std::vector<ExprPtr> args;      // CALL / FILTER / TEST positional arguments
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr star_args, star_kwargs; // *args / **kwargs in calls
  UnaryOp unary_op = UnaryOp::NOT;
  BinaryOp binary_op = BinaryOp::ADD;
  bool negated = false;           // TEST: `is not`
  std::vector<BinaryOp> compare_ops;  // COMPARE: operands in items, one op between each pair

  Expr(ExprKind k, int l) : kind(k), line(l) {}
};

enum class StmtKind {
  TEXT, PRINT, IF, FOR, SET, SET_BLOCK, MACRO, CALL_BLOCK, FILTER_BLOCK, BREAK, CONTINUE,
  WITH, SCOPE  // SCOPE: a body rendered in place ({% block %}, {% generation %})
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null: required (undefined when not passed)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                 // TEXT; MACRO name
  ExprPtr expr;                     // PRINT value; FOR iterable; SET value; CALL_BLOCK call
  ExprPtr target;                   // FOR / SET / SET_BLOCK target (NAME, TUPLE of NAMEs or GETATTR)
  ExprPtr filter;                   // FOR `if` condition; SET_BLOCK / FILTER_BLOCK filter chain
  std::vector<std::pair<ExprPtr, Body>> branches;  // IF: (condition, body) for if / elif
  Body body;                        // FOR / MACRO / CALL_BLOCK / FILTER_BLOCK / WITH / SCOPE / SET_BLOCK
  Body else_body;                   // IF else; FOR else
  std::vector<Param> params;        // MACRO / CALL_BLOCK (caller's) parameters
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;  // WITH
  bool recursive = false;           // FOR ... recursive
  // MACRO / CALL_BLOCK: the body names varargs / kwargs / caller. jinja2 accepts extra
  // positional or keyword arguments (and a caller) only then; otherwise a TypeError.
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
  // Names undefined when the scope this statement opens starts (its body; else_fresh: a
  // loop's else), whatever outer variables say: jinja2's scoping (scoping.cpp).
  std::vector<std::string> fresh, else_fresh;

  Stmt(StmtKind k, int l) : kind(k), line(l) {}
};

}  // namespace spark::jinja
