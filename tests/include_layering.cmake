# CTest script: the host headers' includes go one way. Reads every header
# under INCLUDE_DIR/kvpolicy and its `#include "kvpolicy/..."` lines (all of
# them, conditional or not), and fails, naming the files, on
# - an include cycle (a header that reaches itself, e.g. a part that
#   includes the header that includes it), and
# - an upward arrow: a header of one room (the folder under kvpolicy/)
#   including a header of a room above it in ROOMS.
# A header directly under kvpolicy/ (the umbrella) sits above every room; a
# folder missing from ROOMS is an error, so a new room gets a place.
# Inputs: INCLUDE_DIR (include/), ROOMS (the rooms, bottom to top, separated
# by ',').
cmake_minimum_required(VERSION 3.25)  # policies of a script run with -P (if(TRUE), while(TRUE))
if(NOT INCLUDE_DIR OR NOT ROOMS)
    message(FATAL_ERROR "include_layering.cmake: give -D INCLUDE_DIR=<include/> -D ROOMS=<room,room,...>")
endif()
string(REPLACE "," ";" rooms "${ROOMS}")
file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/kvpolicy/*.hpp")
list(SORT headers)

set(problems "")
list(LENGTH rooms top)
function(room_of header out)
    if(header MATCHES "^kvpolicy/([^/]+)/")
        list(FIND rooms "${CMAKE_MATCH_1}" at)
        if(at EQUAL -1)
            list(APPEND problems "${header}: room '${CMAKE_MATCH_1}' is not in ROOMS (tests/CMakeLists.txt): "
                                "give it its place, bottom to top")
            set(problems "${problems}" PARENT_SCOPE)
        endif()
        set(${out} ${at} PARENT_SCOPE)
    else()
        set(${out} ${top} PARENT_SCOPE)  # the umbrella, above every room
    endif()
endfunction()

# The graph: out_<id> lists the headers each header includes.
set(nodes "")
foreach(h IN LISTS headers)
    string(MAKE_C_IDENTIFIER "${h}" id)
    set(out_${id} "")
    list(APPEND nodes "${h}")
    file(STRINGS "${INCLUDE_DIR}/${h}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]kvpolicy/")
    room_of("${h}" from)
    foreach(line IN LISTS lines)
        if(NOT line MATCHES "include[ \t]*[<\"](kvpolicy/[^>\"]+)[>\"]")
            continue()
        endif()
        set(to "${CMAKE_MATCH_1}")
        if(NOT EXISTS "${INCLUDE_DIR}/${to}")
            continue()  # another package's header (kvpolicy/redis.hpp, kvpolicy/cuda/...), not this graph's
        endif()
        list(APPEND out_${id} "${to}")
        room_of("${to}" dest)
        if(from GREATER_EQUAL 0 AND dest GREATER from)
            list(GET rooms ${from} from_room)
            list(GET rooms ${dest} dest_room)
            list(APPEND problems "upward arrow: ${h} includes ${to} (${from_room} is below ${dest_room})")
        endif()
    endforeach()
endforeach()

# Cycles: peel off headers that include nothing left (Kahn's algorithm,
# from the sinks); what stays is on a cycle or leads into one. Walk from a
# stayer along includes that stay until a header repeats: that loop is a
# cycle. Name it, cut the edge that closed it, and peel again.
set(remaining "${nodes}")
while(TRUE)
    set(changed TRUE)
    while(changed)
        set(changed FALSE)
        set(kept "")
        foreach(h IN LISTS remaining)
            string(MAKE_C_IDENTIFIER "${h}" id)
            set(live FALSE)
            foreach(to IN LISTS out_${id})
                list(FIND remaining "${to}" at)
                if(NOT at EQUAL -1)
                    set(live TRUE)
                    break()
                endif()
            endforeach()
            if(live)
                list(APPEND kept "${h}")
            else()
                set(changed TRUE)
            endif()
        endforeach()
        set(remaining "${kept}")
    endwhile()
    if(NOT remaining)
        break()
    endif()
    list(GET remaining 0 at_node)
    set(path "")
    while(TRUE)
        list(FIND path "${at_node}" seen)
        if(NOT seen EQUAL -1)
            break()
        endif()
        list(APPEND path "${at_node}")
        string(MAKE_C_IDENTIFIER "${at_node}" id)
        foreach(to IN LISTS out_${id})
            list(FIND remaining "${to}" live)
            if(NOT live EQUAL -1)
                set(at_node "${to}")
                break()
            endif()
        endforeach()
    endwhile()
    list(SUBLIST path ${seen} -1 loop)
    list(GET path -1 last)
    list(APPEND loop "${at_node}")
    list(JOIN loop " -> " text)
    list(APPEND problems "include cycle: ${text}")
    string(MAKE_C_IDENTIFIER "${last}" id)
    list(REMOVE_ITEM out_${id} "${at_node}")
endwhile()

if(problems)
    list(REMOVE_DUPLICATES problems)
    list(JOIN problems "\n  " text)
    message(FATAL_ERROR "kvpolicy's host headers include each other the wrong way (rooms, bottom to top: "
                        "${ROOMS}):\n  ${text}\n"
                        "Includes go one way: a header includes only headers of its own room or rooms below, "
                        "and never one that (directly or not) includes it.")
endif()
list(LENGTH headers count)
message(STATUS "include layering: ${count} headers, no cycle, no upward arrow (rooms ${ROOMS})")
